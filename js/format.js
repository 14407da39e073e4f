// Number formatting for the dashboard. Pure functions: a value that is missing, null or not a finite
// number is unknown and reads "n/a"; a known zero reads "0". Nothing here guesses a value.

export const NA = "n/a";

const PREFIXES = ["", "k", "M", "G", "T", "P", "E", "Z", "Y"];

/** True for a finite number (not null, undefined, NaN or ±Infinity). */
export function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}

/**
 * Scale to an SI prefix with `digits` significant digits: si(5.3e6, "FLOP/token") -> "5.30 MFLOP/token",
 * si(163840, "", 4) -> "163.8k". Values below 1 keep their digits without a prefix (0.51 -> "0.510").
 */
export function si(x, unit = "", digits = 3) {
  if (!isNum(x)) return NA;
  const sep = unit ? " " : "";
  const abs = Math.abs(x);
  if (abs < 1) return `${x === 0 ? "0" : x.toPrecision(digits)}${sep}${unit}`;
  let tier = Math.min(Math.floor(Math.log10(abs) / 3), PREFIXES.length - 1);
  let scaled = x / 10 ** (3 * tier);
  // 999.96 rounds to "1000": move up a prefix instead of printing four digits.
  if (Math.abs(Number(scaled.toPrecision(digits))) >= 1000 && tier < PREFIXES.length - 1) {
    tier += 1;
    scaled = x / 10 ** (3 * tier);
  }
  // Past the largest prefix: scientific, as the core's format_si writes it ("1.00e+30 FLOP").
  if (Math.abs(Number(scaled.toPrecision(digits))) >= 1000) return `${x.toExponential(digits - 1)}${sep}${unit}`;
  return `${scaled.toPrecision(digits)}${sep}${PREFIXES[tier]}${unit}`;
}

const TOKEN_SUFFIXES = ["", "k", "M", "B", "T"];

/**
 * A token count the way people say it about LLM training (k, M, B, T, as in `--budget-tokens 20B`),
 * with `digits` significant digits: 163840 -> "163.8k", 2e9 -> "2.00B". FLOPs keep SI prefixes.
 */
export function tokens(x, digits = 4) {
  if (!isNum(x)) return NA;
  if (Math.abs(x) < 1000) return count(x);
  const s = si(x, "", digits); // "163.8k", "2.000G", ...
  const tier = PREFIXES.indexOf(s.slice(-1)); // -1 past the largest prefix ("1.000e+30")
  return tier >= 0 && tier < TOKEN_SUFFIXES.length ? s.slice(0, -1) + TOKEN_SUFFIXES[tier] : x.toExponential(digits - 1);
}

/** An integer count with thousands separators, independent of the browser's locale: 12345 -> "12,345". */
export function count(x) {
  if (!isNum(x)) return NA;
  return Math.round(x)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

const pad2 = (n) => String(n).padStart(2, "0");

/**
 * A duration in seconds, as short as its size allows: 0.51 -> "510 ms", 61.2 -> "1m 01s",
 * 6600 -> "1h 50m", 200000 -> "2d 07h". Negative durations are unknown.
 */
export function duration(s) {
  if (!isNum(s) || s < 0) return NA;
  // Thresholds sit just below each unit so that rounding never prints "1000 ms" or "60.0 s".
  if (s < 0.9995) return `${(s * 1000).toPrecision(3).replace(/\.0+$|(\.\d*[1-9])0+$/, "$1")} ms`;
  if (s < 59.95) return `${s.toPrecision(3)} s`;
  const t = Math.round(s);
  if (t < 3600) return `${Math.floor(t / 60)}m ${pad2(t % 60)}s`;
  if (t < 86400) return `${Math.floor(t / 3600)}h ${pad2(Math.floor((t % 3600) / 60))}m`;
  return `${Math.floor(t / 86400)}d ${pad2(Math.floor((t % 86400) / 3600))}h`;
}

/** A fraction as a percentage: 0.0082 -> "0.82%", 0.412 -> "41.2%". */
export function percent(f) {
  if (!isNum(f)) return NA;
  const p = f * 100;
  const abs = Math.abs(p);
  // below 0.01 % two decimals would read "0.00%", a zero that is not one: two significant digits
  if (abs !== 0 && abs < 0.01) return `${+p.toPrecision(2)}%`;
  if (abs !== 0 && abs < 1) return `${p.toFixed(2)}%`;
  return `${p.toFixed(1)}%`;
}

/** A plain value with `digits` significant digits (loss values): 2.3125 -> "2.31". */
export function num(x, digits = 3) {
  if (!isNum(x)) return NA;
  if (x === 0) return "0";
  const abs = Math.abs(x);
  if (abs >= 10 ** digits || abs < 1e-3) return x.toExponential(digits - 1);
  return x.toPrecision(digits);
}

/**
 * Dollars with cents and thousands separators: 1234.5 -> "$1,234.50"; a positive amount under a
 * cent reads "< $0.01" (never "$0.00", which would claim it was free).
 */
export function dollars(x) {
  if (!isNum(x)) return NA;
  if (x > 0 && x < 0.005) return "< $0.01";
  const sign = x < 0 ? "-" : "";
  const [whole, cents] = Math.abs(x).toFixed(2).split(".");
  return `${sign}$${whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",")}.${cents}`;
}

const BINARY = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/** Bytes in binary units, as memory is sold and `nvidia-smi` prints it: 6.57e10 -> "61.2 GiB". */
export function bytes(x) {
  if (!isNum(x) || x < 0) return NA;
  if (x < 1024) return `${Math.round(x)} B`;
  let tier = Math.min(Math.floor(Math.log2(x) / 10), BINARY.length - 1);
  let scaled = x / 1024 ** tier;
  if (Number(scaled.toPrecision(3)) >= 1024 && tier < BINARY.length - 1) {
    tier += 1;
    scaled = x / 1024 ** tier;
  }
  return `${scaled.toPrecision(3)} ${BINARY[tier]}`;
}

/** Energy in kilowatt-hours from joules (1 kWh = 3.6e6 J): 4.5e7 -> "12.5 kWh". */
export function kwh(joules) {
  if (!isNum(joules) || joules < 0) return NA;
  const k = joules / 3.6e6;
  if (k >= 1000) return `${count(k)} kWh`;
  if (k === 0) return "0 kWh";
  if (k < 1e-3) return `${(k * 1000).toPrecision(3)} Wh`;
  return `${k.toPrecision(3)} kWh`;
}

/** A local date and time from seconds since the Unix epoch: "2025-11-30 09:15". */
export function dateTime(epochS) {
  if (!isNum(epochS) || epochS <= 0) return NA;
  const d = new Date(epochS * 1000);
  return (
    `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ` +
    `${pad2(d.getHours())}:${pad2(d.getMinutes())}`
  );
}

/** A plain amount with `digits` significant digits, thousands separated from 1000 up: 0.512 -> "0.512", 1234.5 -> "1,235". */
export function amount(x, digits = 3) {
  if (!isNum(x)) return NA;
  if (Math.abs(x) >= 10 ** digits) return count(x);
  if (x === 0) return "0";
  return x.toPrecision(digits);
}
