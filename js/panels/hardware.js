// Hardware: per GPU, the utilization ladder (GPU-Util >= SM activity >= SM occupancy, and
// tensor-pipe activity) now and over time (timeline series gpu<i>/<field>), DRAM activity and
// arithmetic intensity beside the device's ridge point, memory, power, clocks and throttle reasons;
// then the host's CPU and memory. These are counter metrics: they sit beside MFU, never in its
// place (the counters-beside invariant). A field the device cannot report says why ("not on this GPU: needs Hopper or
// newer"), never a zero. With no sample at all, one plain line says the sampler is not running.
// Every such word is the core's: a field's reason from the sampler or core/counters.py, the
// hardware's and a GPU chart's from the snapshot's `reasons`; none says "yet" once the run ended.

import {
  demonstration,
  gpuField,
  gpuMean,
  gpusOf,
  gpuTitle,
  hardwareWhy,
  isObj,
  LADDER,
  notMeasured,
  splitReason,
  str,
  whyMissing,
} from "../derive.js";
import { el, setReason, setText } from "../dom.js";
import { bytes, isNum, kwh, percent, si } from "../format.js";
import { align } from "../state.js";
import { createChartSlot } from "./chartslot.js";
import { createBanner, createPanel } from "./panel.js";

/** @typedef {import("../contract.js").Panel} Panel */
/** @typedef {import("../contract.js").PanelContext} PanelContext */
/** @typedef {import("../contract.js").Theme} Theme */

// Theme colour per ladder field (style.css --tm-series-<n>); DRAM activity is drawn dashed.
const COLOR = { gpu_util: 1, sm_active: 2, sm_occupancy: 3, tensor_active: 4, dram_active: 5 };
const CHART_FIELDS = [...LADDER, { field: "dram_active", label: "DRAM activity" }];

/** A number and its unit ("20.0 FLOP/B") joined by a no-break space: a line breaks before
 * the number or after the unit, never between them. */
const unbroken = (text) => text.replace(/ /g, "\u00a0");

/** @returns {Panel} */
export function createHardware() {
  const panel = createPanel("hardware", "hardware");
  const none = el("div", { class: "tm-line tm-unknown", testid: "tm-hardware-none" });
  const grid = el("div", { class: "tm-gpu-grid" });
  const host = el("div", { class: "tm-host", testid: "tm-host" });
  const caption = el("div", {
    class: "tm-caption",
    text:
      "Counters from the GPUs, shown beside MFU, never in its place. Arithmetic intensity is an average " +
      "over all kernels: on its own it does not make a run compute- or memory-bound.",
  });
  const banner = createBanner(); // fake GPUs: a demonstration, said above their figures
  panel.body.append(banner.el, none, grid, host, caption);

  let cards = [];
  let cardsKey = "";
  let theme = null;

  /** @param {PanelContext} ctx */
  function update({ snap, store, historyChanged }) {
    banner.update(snap);
    const hw = isObj(snap.hardware) ? snap.hardware : null;
    none.hidden = hw !== null;
    grid.hidden = host.hidden = caption.hidden = hw === null;
    if (!hw) {
      const why = hardwareWhy(snap);
      setReason(none, why);
      panel.summarize(splitReason(why)[0]);
      if (cards.length) rebuild([]);
      return;
    }
    const gpus = gpusOf(hw);
    const key = gpus.map((g) => `${g.index}:${str(g.name)}:${str(g.node)}`).join("|");
    if (key !== cardsKey) {
      cardsKey = key;
      rebuild(gpus);
      historyChanged = true;
    }
    const fake = demonstration(snap) !== null; // a fake GPU's card says so in its title
    gpus.forEach((g, i) => cards[i].update(g, store, historyChanged, fake, snap));
    drawHost(host, hw.host, notMeasured(snap));
    const util = gpuMean(snap, "gpu_util").value; // the engine's mean over the GPUs (gpu_mean)
    panel.summarize(
      gpus.length ? `${gpus.length} GPU${gpus.length > 1 ? "s" : ""}${util !== null ? ` · GPU-Util ${percent(util)}` : ""}` : "host only",
    );
    if (!gpus.length) {
      grid.hidden = true;
      caption.hidden = true; // it is about the GPUs' counters: none here
    }
  }

  function rebuild(gpus) {
    for (const c of cards) c.destroy();
    cards = gpus.map(() => createGpuCard(theme));
    grid.replaceChildren(...cards.map((c) => c.el));
  }

  return {
    el: panel.el,
    update,
    setTheme(t) {
      theme = t;
      for (const c of cards) c.setTheme(t);
    },
    destroy() {
      for (const c of cards) c.destroy();
      cards = [];
    },
  };
}

/** @param {Theme | null} theme */
function createGpuCard(theme) {
  const title = el("div", { class: "tm-card-title tm-gpu-title" });
  const ladder = el("div", { class: "tm-ladder" });
  const rows = LADDER.map(({ field, label }) => {
    const fill = el("div", { class: `tm-ladder-fill tm-bg-${COLOR[field]}` });
    const bar = el("div", { class: "tm-ladder-bar" }, fill);
    const value = el("span", { class: "tm-ladder-value" });
    ladder.append(
      el(
        "div",
        { class: "tm-ladder-row" },
        el("span", { class: "tm-ladder-label" }, el("span", { class: `tm-swatch tm-swatch-${COLOR[field]}` }), document.createTextNode(label)),
        bar,
        value,
      ),
    );
    return { field, fill, bar, value };
  });
  const slot = createChartSlot({ small: true }); // the core's reason while it has nothing to draw
  if (theme) slot.setTheme(theme);
  const legendNote = el("div", { class: "tm-caption tm-chart-note" });
  const facts = el("dl", { class: "tm-facts tm-facts-compact" });
  const fact = (label) => {
    const value = el("span", { class: "tm-fact-value" });
    const sub = el("span", { class: "tm-fact-sub" });
    facts.append(el("dt", { text: label }), el("dd", {}, value, sub));
    return { value, sub };
  };
  const f = {
    dram: fact("DRAM activity"),
    intensity: fact("arithmetic intensity"),
    memory: fact("memory"),
    power: fact("power"),
    clocks: fact("clocks"),
    throttle: fact("throttle reasons"),
    energy: fact("energy"),
  };
  const root = el(
    "div",
    { class: "tm-card tm-gpu" },
    title,
    ladder,
    slot.el,
    legendNote,
    facts,
  );

  let fields = [];

  function updateChart(gpu, store, historyChanged, snap) {
    fields = CHART_FIELDS.filter(({ field }) => store.series.has(`gpu${gpu.index}/${field}`));
    setText(legendNote, fields.some((p) => p.field === "dram_active") ? "dashed: DRAM activity" : "");
    slot.say(fields.length ? "" : whyMissing(snap, "gpu_activity"));
    if (!fields.length) {
      slot.clear();
      return;
    }
    const made = slot.ensure(fields.map((p) => p.field).join(","), () => ({
      series: fields.map(({ field, label }) => ({
        label,
        color: COLOR[field],
        width: field === "dram_active" ? 1.25 : 1.5,
        dash: field === "dram_active" ? [4, 3] : undefined,
      })),
      height: (w) => Math.round(Math.min(160, Math.max(125, w * 0.3))),
      x: "time", // the sampler's readings are at seconds of the run, not at steps
      yLabel: "activity (%)",
      yRange: [0, 100],
    }));
    if (made || historyChanged) {
      const cols = fields.map(({ field }) => {
        const s = store.series.get(`gpu${gpu.index}/${field}`);
        return { xs: s.xs, ys: s.ys.map((y) => (y === null ? null : 100 * y)) };
      });
      slot.setData(align(cols));
    }
  }

  function show(node, item, fmt, sub = "") {
    const v = item.value;
    setText(node.value, v === null ? item.why : fmt(v));
    node.value.classList.toggle("tm-unknown", v === null);
    setText(node.sub, v === null || !sub ? "" : ` ${sub}`);
  }

  return {
    el: root,
    update(gpu, store, historyChanged, fake = false, snap = {}) {
      const unknown = notMeasured(snap); // a field the core gave no reason for
      const field = (name) => gpuField(gpu, name, unknown);
      setText(title, `${gpuTitle(gpu)}${fake ? " (fake)" : ""}`);
      for (const r of rows) {
        const item = field(r.field);
        const known = item.value !== null;
        r.bar.hidden = !known;
        if (known) r.fill.style.width = `${Math.min(100, Math.max(0, item.value * 100))}%`;
        setText(r.value, known ? percent(item.value) : item.why);
        r.value.classList.toggle("tm-unknown", !known);
        r.value.classList.toggle("tm-ladder-why", !known);
      }
      updateChart(gpu, store, historyChanged, snap);

      show(f.dram, field("dram_active"), percent);
      const ridge = field("ridge_point");
      show(
        f.intensity,
        field("intensity"),
        (v) => `${si(v, "FLOP/B")}`,
        ridge.value !== null ? `· device ridge point ${unbroken(si(ridge.value, "FLOP/B"))}` : `· ridge point: ${ridge.why}`,
      );
      const used = field("mem_used_bytes");
      const total = field("mem_total_bytes");
      const train = field("train_mem_bytes");
      const memSub = [
        total.value !== null ? `of ${unbroken(bytes(total.value))}` : "",
        train.value !== null ? `· training processes ${unbroken(bytes(train.value))}` : "",
      ];
      show(f.memory, used, bytes, memSub.filter(Boolean).join(" "));
      const limit = field("power_limit_w");
      show(f.power, field("power_w"), (v) => si(v, "W"), limit.value !== null ? `of ${unbroken(si(limit.value, "W"))} limit` : "");
      const sm = field("sm_clock_mhz");
      const mem = field("mem_clock_mhz");
      show(f.clocks, sm, (v) => `SM ${Math.round(v)} MHz`, mem.value !== null ? `· memory ${Math.round(mem.value)} MHz` : "");
      const throttle = Array.isArray(gpu.throttle) ? gpu.throttle.filter((t) => typeof t === "string" && t) : null;
      if (throttle) show(f.throttle, { value: throttle }, (t) => (t.length ? t.join(", ") : "none"));
      else {
        const reason = isObj(gpu.missing) ? str(gpu.missing.throttle) : "";
        show(f.throttle, { value: null, why: reason || unknown }, String);
      }
      f.throttle.value.classList.toggle("tm-warn", Boolean(throttle && throttle.length));
      show(f.energy, field("energy_j"), kwh);
    },
    setTheme: slot.setTheme,
    destroy: slot.destroy,
  };
}

/**
 * Host CPU and memory: "host CPU 37.5% · memory 61.2 GiB of 2.00 TiB · RSS 12.3 GiB"; a missing
 * figure says the core's reason for it (`host.missing`: "not sampled", "needs two readings ..."),
 * said once for both when it is the same ("host CPU and memory: not sampled"). `unknown`: what a
 * field the core gave no reason for says (notMeasured).
 * @param {any} h the snapshot's hardware.host
 * @param {string} unknown
 */
export function hostText(h, unknown) {
  if (!isObj(h)) return `host CPU and memory: ${unknown}`;
  const why = (key) => (isObj(h.missing) ? str(h.missing[key]) : "") || unknown;
  const cpu = isNum(h.cpu_util) ? percent(h.cpu_util) : why("cpu_util");
  const mem = isNum(h.mem_used_bytes) ? bytes(h.mem_used_bytes) : why("mem_used_bytes");
  const parts =
    !isNum(h.cpu_util) && !isNum(h.mem_used_bytes) && cpu === mem
      ? [`host CPU and memory: ${cpu}`]
      : [`host CPU ${cpu}`, `memory ${mem}${isNum(h.mem_total_bytes) && isNum(h.mem_used_bytes) ? ` of ${bytes(h.mem_total_bytes)}` : ""}`];
  if (isNum(h.rss_bytes)) parts.push(`RSS ${bytes(h.rss_bytes)}`);
  return parts.join(" · ");
}

function drawHost(node, h, unknown) {
  setText(node, hostText(h, unknown));
}
