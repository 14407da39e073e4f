// The panel contract, written once: what every panel of the dashboard receives from dashboard.js
// and what it gives back. Types only (JSDoc); `tsc -p jsconfig.json`, run by `npm test`, checks
// the panels and derive.js against them, so one that reads a snapshot field not listed here (a
// misspelt key, a key the engine does not send) fails the tests. The timeline's series names are
// strings the check cannot see: they are listed under Timeline.
//
// The front end only shows what the engine computed (trainmeter/core/engine.py): the snapshot's
// figures and the timeline's series. A figure missing from the snapshot is shown with its reason,
// never computed here from other figures (shares, ratios, means and fractions are snapshot keys
// too). The one computation left in the browser is the view-time overlay: dollars at a price per
// GPU-hour typed into the view (View.price), which must never reach the kernel or the log.

/**
 * One chart series as the store holds it (state.js): x ascending, y a number or null (a gap; a NaN
 * on the wire arrives as null).
 * @typedef {object} Series
 * @property {number[]} xs
 * @property {(number | null)[]} ys
 */

/**
 * The timeline the panels draw (docs/spec.md "The chart timeline"), by series name:
 * - what the training code reported (`train_loss`, `val_loss`, ...; their role is in
 *   `Snapshot.series`), at their step;
 * - `tokens_per_s`, at each timed step of the step clock;
 * - `mfu/<convention>` (`mfu/titan`, ...): the snapshot's MFU as it stood at each timed step, for
 *   each convention with FLOPs per token, when there is a peak (the engine's `_mfu_scale`:
 *   each `tokens_per_s` point times its scale, at the same steps);
 * - `gpu<i>/<field>` (`gpu0/sm_active`, ...), fractions, at each sampler reading (x: seconds).
 * @typedef {Map<string, Series>} Timeline
 */

/**
 * By-convention figures (`hf`, `megatron`, `titan`, `embeddings`, ...); null where unknown.
 * @typedef {Record<string, number | null>} ByConvention
 */

/**
 * @typedef {object} RunInfo
 * @property {string} [id]
 * @property {string} [name]
 * @property {string} [state] running, finished, failed, interrupted, idle, ended
 * @property {string} [state_text] the state in words, as the core said it
 * @property {number} [segment]
 * @property {number} [started] s since the epoch
 * @property {number} [ended] s since the epoch: the run_end record's (absent while the run is open)
 * @property {string} [version] trainmeter's, as the run's supervisor had it
 */

/**
 * The agent's model record (docs/spec.md "Run log", `model`), as the engine combined the ranks'.
 * @typedef {object} ModelInfo
 * @property {string} [name]
 * @property {number} [params]
 * @property {number} [embedding_params]
 * @property {number} [layers]
 * @property {number} [width]
 * @property {number} [heads]
 * @property {number} [vocab]
 * @property {number} [seq_len]
 * @property {number} [context]
 * @property {string} [device]
 * @property {string} [device_name]
 * @property {number} [gpus]
 * @property {string} [dtype]
 * @property {string} [run_dtype]
 */

/**
 * The dense peak MFU divides by (docs/spec.md "Peaks").
 * @typedef {object} PeakInfo
 * @property {number} flops FLOP/s of one device
 * @property {string} [dtype]
 * @property {string} [device]
 * @property {string} [source] "table" or "declared"
 * @property {string} [citation]
 * @property {boolean} [verified]
 */

/**
 * The plan at an assumed MFU (core/plan.py).
 * @typedef {object} PlanInfo
 * @property {number} [mfu]
 * @property {number} [tokens_per_s]
 * @property {number | null} [eta_s]
 * @property {string} [source]
 */

/**
 * One GPU's latest sample with its derived counters (core/hardware.py, core/counters.py); a field
 * the device cannot report is null with its reason in `missing`.
 * @typedef {Record<string, any> & {index?: number, name?: string, node?: string,
 *   node_index?: number, throttle?: string[] | null, missing?: Record<string, string>}} GpuSample
 */

/**
 * The run against its plan (core/plan.py `versus`): achieved over planned, and the ETA's
 * difference; null where either side is unknown.
 * @typedef {object} PlanVersus
 * @property {number | null} [tokens_per_s] achieved over planned tokens/s (1.0 = on plan)
 * @property {number | null} [mfu] achieved over planned MFU, the run's convention
 * @property {number | null} [eta_late_s] ETA less the planned ETA (s; above 0: later)
 */

/**
 * Means over the run's GPUs (core/hardware.py `gpu_means`); a mean no GPU has is null with its
 * reason in `missing`.
 * @typedef {object} GpuMean
 * @property {number | null} [gpu_util]
 * @property {number | null} [ofu] a counter (tensor-pipe activity), beside MFU
 * @property {number | null} [observed_flops_per_s] per GPU
 * @property {Record<string, string>} [missing]
 */

/**
 * A run on a fake GPU backend (core/reasons.py `demonstration`): the core's words for it.
 * @typedef {object} Demonstration
 * @property {string} [backend] "fake:h100x2"
 * @property {number} [gpus] the fake GPUs
 * @property {string} [text] "demonstration: 2 × fake H100" (the header's and passport's line)
 * @property {string} [banner] "demonstration, not a measurement: ..." (on each panel of its figures)
 */

/**
 * @typedef {object} HardwareInfo
 * @property {string} [backend] "nvml", "none", "fake:h100x2", ...
 * @property {GpuSample[]} [gpus]
 * @property {{cpu_util?: number, mem_used_bytes?: number, mem_total_bytes?: number,
 *   rss_bytes?: number, missing?: Record<string, string>}} [host] a null field's reason in `missing`
 */

/**
 * HFU [counted] (docs/spec.md "Samples, FLOPs per sample and HFU [counted]"): the counted step's
 * executed FLOPs per token or per sample x the rate, over the devices' dense peak. Never an MFU.
 * @typedef {object} HfuCounted
 * @property {number | null} [value] at the recent rate (a fraction)
 * @property {number | null} [avg] at the run's mean rate
 * @property {number | null} [flops_per_s] executed FLOP/s of all devices
 * @property {string | null} [per] "token" or "sample"
 * @property {string | null} [why] why value is null, the engine's words
 */

/**
 * The snapshot fields the panels read (docs/spec.md "Snapshot" and "Snapshot keys for the
 * dashboard"); any may be missing or null until measured.
 * @typedef {object} Snapshot
 * @property {RunInfo} [run]
 * @property {number | null} [step]
 * @property {number | null} [tokens]
 * @property {number | null} [elapsed_s]
 * @property {number | null} [tokens_per_s]
 * @property {number | null} [tokens_per_s_avg]
 * @property {number | null} [samples] fed in training forward passes, all ranks
 * @property {number | null} [samples_per_s] every rank's own recent rate, summed
 * @property {number | null} [samples_per_s_avg]
 * @property {number | null} [samples_per_step] the job's samples per step
 * @property {string | null} [tokens_missing] why a run fed no token ids has no tokens
 * @property {string | null} [conventions_missing] why no named convention describes the model
 * @property {number | null} [step_time_s]
 * @property {number | null} [budget_tokens]
 * @property {number | null} [budget_flops]
 * @property {number | null} [progress] tokens over budget_tokens
 * @property {number | null} [progress_flops] FLOPs spent (the run's convention) over budget_flops
 * @property {number | null} [eta_s]
 * @property {ModelInfo | null} [model]
 * @property {number | null} [params_without_embeddings] params less embedding_params
 * @property {string | null} [dtype]
 * @property {string} [convention]
 * @property {ByConvention | null} [flops_per_token]
 * @property {Record<string, string[]> | null} [flops_per_token_missing]
 * @property {number | null} [flops_per_token_seq_len]
 * @property {number | null} [seq_len_mean]
 * @property {ByConvention | null} [flops_spent]
 * @property {ByConvention | null} [flops_required]
 * @property {ByConvention | null} [model_flops_per_s]
 * @property {ByConvention | null} [model_flops_per_s_per_gpu]
 * @property {number | null} [flops_per_token_counted]
 * @property {{step?: number, tokens?: number | null, samples?: number | null, attention?: string,
 *   not_counted?: string[]} | null} [flops_counted]
 * @property {number | null} [flops_per_sample_counted] executed FLOP/sample of the counted step
 * @property {HfuCounted | null} [hfu_counted]
 * @property {string | null} [tokens_counting]
 * @property {PeakInfo | null} [peak]
 * @property {ByConvention | null} [mfu] at tokens_per_s
 * @property {ByConvention | null} [mfu_avg] at tokens_per_s_avg
 * @property {number | null} [gpus] devices MFU divides by
 * @property {number | null} [gpu_hours]
 * @property {number | null} [gpu_hours_to_finish]
 * @property {PlanInfo | null} [plan]
 * @property {PlanVersus | null} [plan_vs_actual]
 * @property {number | null} [energy_j]
 * @property {HardwareInfo | null} [hardware]
 * @property {GpuMean | null} [gpu_mean]
 * @property {Record<string, number> | null} [time_split] seconds per bucket
 * @property {Record<string, number | null> | null} [time_share] time_split's shares
 * @property {Record<string, number>} [ranks]
 * @property {Record<string, number | null>} [rank_step_time_s]
 * @property {Record<string, number | null> | null} [rank_over_fastest] step time over the fastest
 *   rank's, less 1 (0: the fastest)
 * @property {Record<string, number | null>} [rank_lag_s]
 * @property {Record<string, Record<string, number>>} [rank_time_split]
 * @property {Record<string, Record<string, number | null> | null> | null} [rank_time_share]
 * @property {number[] | Record<string, any> | null} [stragglers]
 * @property {Record<string, string>} [straggler_rule]
 * @property {Record<string, string>} [straggler_cause]
 * @property {Record<string, number>} [straggler_cost_s]
 * @property {Record<string, number>} [straggler_share]
 * @property {Record<string, {value?: number | null, step?: number | null, ema?: number | null,
 *   role?: string, superseded?: boolean}>} [series] the last value of each reported series
 * @property {Record<string, any> | null} [process] `tm attach`: the watched process's facts
 * @property {string[]} [notes]
 * @property {Record<string, string>} [reasons] why each missing figure is missing, the core's words
 *   ("n/a: titan needs ..."), keyed by snapshot key or "<key>/<convention>" (core/reasons.py)
 * @property {string | null} [device_text] the run's own device ("2 × NVIDIA H100 80GB HBM3", "cpu")
 * @property {Demonstration | null} [demonstration] fake GPUs: a demonstration, not a measurement
 */

/**
 * The dashboard's store (state.js `createStore`): the latest snapshot and the timeline.
 * @typedef {object} Store
 * @property {Snapshot} snapshot
 * @property {Timeline} series
 * @property {number} seq
 * @property {{snapshot: number, history: number}} rev
 */

/**
 * What one view remembers for itself (view.js): never sent anywhere.
 * @typedef {object} View
 * @property {string} convention "" follows the run's own
 * @property {boolean} logScale
 * @property {number | null} price per GPU-hour, typed in this view
 * @property {number} rev
 * @property {(key: string, value: any) => void} set
 */

/**
 * The chart colours read from CSS (charts.js `readTheme`).
 * @typedef {object} Theme
 * @property {string} fg
 * @property {string} grid
 * @property {string} font
 * @property {string[]} series
 */

/**
 * What a panel's `update` receives at each drawn frame.
 * @typedef {object} PanelContext
 * @property {Snapshot} snap the latest snapshot ({} before the first)
 * @property {Store} store its `series` is the timeline
 * @property {View} view
 * @property {boolean} historyChanged the timeline changed since the last frame
 * @property {boolean} viewChanged this view's controls changed since the last frame
 */

/**
 * A panel: its element, drawn by `update` at each frame; `setTheme` and `destroy` when it has
 * charts.
 * @typedef {object} Panel
 * @property {HTMLElement} el
 * @property {(ctx: PanelContext) => void} update
 * @property {(theme: Theme) => void} [setTheme]
 * @property {() => void} [destroy]
 */

export {};
