// Efficiency strip: FLOPs per token and MFU, each large with its convention's name beside it, the other
// conventions smaller; FLOPs spent against what the budget requires; the peak MFU is measured against.
// No MFU is ever shown without a peak: the reason from the snapshot's notes is shown instead.

import { el } from "../dom.js";
import { isNum, NA, percent, si } from "../format.js";
import { createFigure } from "./figure.js";
import { isObj, str } from "./header.js";

const ORDER = ["hf", "megatron", "titan", "embeddings"];

/** The convention the run reports in: the snapshot's own, else the first it has figures for. */
export function conventionOf(snap) {
  if (str(snap.convention)) return snap.convention;
  const fpt = isObj(snap.flops_per_token) ? Object.keys(snap.flops_per_token) : [];
  return fpt.length ? sortConventions(fpt)[0] : "";
}

/** Known conventions in a fixed order, then any others alphabetically. */
export function sortConventions(names) {
  const known = ORDER.filter((n) => names.includes(n));
  return known.concat(names.filter((n) => !ORDER.includes(n)).sort());
}

/** The first note that explains a missing figure, e.g. "no MFU: no peak is known for this device". */
export function noteAbout(notes, pattern) {
  if (!Array.isArray(notes)) return "";
  return notes.find((n) => typeof n === "string" && pattern.test(n)) || "";
}

/**
 * FLOPs a run needs to reach its token budget under one convention: budget_tokens × FLOPs per token
 * (both from the snapshot; null when either is unknown).
 */
export function flopsRequired(snap, conv) {
  const fpt = isObj(snap.flops_per_token) ? snap.flops_per_token[conv] : null;
  return isNum(snap.budget_tokens) && snap.budget_tokens > 0 && isNum(fpt) ? snap.budget_tokens * fpt : null;
}

export function createEfficiency() {
  const fpt = createFigure("FLOPs per token", "tm-flops-per-token", { wide: true });
  const fptOthers = el("div", { class: "tm-others", testid: "tm-flops-per-token-others" });
  fpt.append(fptOthers);
  const mfu = createFigure("MFU", "tm-mfu", { wide: true });
  const mfuOthers = el("div", { class: "tm-others", testid: "tm-mfu-others" });
  mfu.append(mfuOthers);
  const spent = createFigure("FLOPs spent", "tm-flops-spent");
  const root = el(
    "div",
    { class: "tm-card tm-efficiency" },
    el("div", { class: "tm-card-title", text: "efficiency" }),
    el("div", { class: "tm-eff-grid" }, fpt.el, mfu.el, spent.el),
  );

  return {
    el: root,
    update(snap) {
      const conv = conventionOf(snap);
      const notes = snap.notes;
      const table = isObj(snap.flops_per_token) ? snap.flops_per_token : {};
      const value = conv ? table[conv] : null;
      if (isNum(value)) fpt.set(si(value, "FLOP/token"), { tagText: conv });
      else fpt.set(NA, { subText: noteAbout(notes, /flop|model|param/i) || "model not seen yet", muted: true });
      others(fptOthers, table, conv, (v) => si(v, "FLOP"));

      const fractions = isObj(snap.mfu) ? snap.mfu : {};
      const peak = isObj(snap.peak) ? snap.peak : null;
      if (isNum(fractions[conv]) && peak) {
        mfu.set(percent(fractions[conv]), { tagText: conv, subText: peakLine(peak, snap.model), title: peakTitle(peak) });
      } else {
        const why = noteAbout(notes, /mfu|peak/i) || (peak ? "measuring throughput" : "no peak known");
        mfu.set(NA, { subText: why, muted: true });
      }
      others(mfuOthers, peak ? fractions : {}, conv, percent);

      const done = isObj(snap.flops_spent) ? snap.flops_spent[conv] : null;
      const need = flopsRequired(snap, conv);
      spent.set(si(done, "FLOP"), {
        tagText: isNum(done) ? conv : "",
        subText: isNum(need) ? `of ${si(need, "FLOP")} for the budget` : "",
        muted: !isNum(done),
      });
    },
  };
}

/** "of 989 TFLOP/s bf16 × 8 (datasheet)": what MFU divides by, and where that number came from
 * (a table row not yet re-read from its datasheet says so). */
function peakLine(peak, model) {
  const gpus = isObj(model) && isNum(model.gpus) && model.gpus > 1 ? ` × ${model.gpus}` : "";
  const dtype = str(peak.dtype) ? ` ${peak.dtype}` : "";
  const table = peak.verified === true ? " (datasheet)" : " (table, unverified)";
  const source = peak.source === "declared" ? " (declared)" : peak.source === "table" ? table : "";
  return `of ${si(peak.flops, "FLOP/s", 4)}${dtype}${gpus}${source}`;
}

function peakTitle(peak) {
  return [str(peak.device), str(peak.citation)].filter(Boolean).join(" — ") || null;
}

/** The other conventions, small: "4.70 MFLOP [hf]". Rebuilt only when the text changes. */
const shown = new WeakMap();
function others(container, table, conv, fmt) {
  const names = sortConventions(Object.keys(table)).filter((n) => n !== conv && isNum(table[n]));
  const text = names.map((n) => `${fmt(table[n])} [${n}]`);
  const key = text.join("\n");
  if (shown.get(container) === key) return;
  shown.set(container, key);
  container.replaceChildren(...text.map((t) => el("span", { class: "tm-other", text: t })));
}
