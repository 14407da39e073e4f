import assert from "node:assert/strict";
import test from "node:test";
import { count, duration, NA, num, percent, si, tokens } from "../format.js";

test("unknown values read n/a, never zero", () => {
  for (const v of [null, undefined, Number.NaN, Number.POSITIVE_INFINITY, "12"]) {
    assert.equal(si(v), NA);
    assert.equal(count(v), NA);
    assert.equal(duration(v), NA);
    assert.equal(percent(v), NA);
    assert.equal(num(v), NA);
  }
  assert.equal(duration(-1), NA);
});

test("SI prefixes keep three significant digits and carry the unit", () => {
  assert.equal(si(5.3e6, "FLOP/token"), "5.30 MFLOP/token");
  assert.equal(si(8.7e11, "FLOP"), "870 GFLOP");
  assert.equal(si(9.895e14, "FLOP/s"), "990 TFLOP/s");
  assert.equal(si(163840, "", 4), "163.8k");
  assert.equal(si(3000.5), "3.00k");
  assert.equal(si(999.96), "1.00k");
  assert.equal(si(42), "42.0");
  assert.equal(si(0), "0");
  // past the largest prefix (Y): scientific, as the core's format_si (tests/unit/test_units.py)
  assert.equal(si(999.4e24, "FLOP"), "999 YFLOP");
  assert.equal(si(999.96e24, "FLOP"), "1.00e+27 FLOP");
  assert.equal(si(1e300, "tokens/s"), "1.00e+300 tokens/s");
  assert.equal(si(-5e30, "W", 4), "-5.000e+30 W");
});

test("token counts use k, M, B, T as people say them", () => {
  assert.equal(tokens(163840), "163.8k");
  assert.equal(tokens(2e9, 3), "2.00B");
  assert.equal(tokens(1.5e12, 3), "1.50T");
  assert.equal(tokens(12), "12");
  assert.equal(tokens(0), "0");
  assert.equal(tokens(3e30, 3), "3.00e+30");
  assert.equal(tokens(null), NA);
});

test("durations are as short as their size allows", () => {
  assert.equal(duration(0.51), "510 ms");
  assert.equal(duration(0.9999), "1.00 s");
  assert.equal(duration(5.123), "5.12 s");
  assert.equal(duration(59.99), "1m 00s");
  assert.equal(duration(61.2), "1m 01s");
  assert.equal(duration(6600), "1h 50m");
  assert.equal(duration(200000), "2d 07h");
});

test("percentages, counts and plain numbers", () => {
  assert.equal(percent(0.0082), "0.82%");
  assert.equal(percent(3.2e-5), "0.0032%"); // a tiny MFU (fake GPUs, CPU model) is not "0.00%"
  assert.equal(percent(0.412), "41.2%");
  assert.equal(percent(0), "0.0%");
  assert.equal(count(1234567), "1,234,567");
  assert.equal(count(40), "40");
  assert.equal(num(2.3125), "2.31");
  assert.equal(num(0), "0");
});

test("dollars, bytes, energy and plain amounts", async () => {
  const { amount, bytes, dollars, kwh } = await import("../format.js");
  assert.equal(dollars(30), "$30.00");
  assert.equal(dollars(1234.5), "$1,234.50");
  assert.equal(dollars(0), "$0.00");
  assert.equal(dollars(0.001), "< $0.01");
  assert.equal(dollars(null), NA);
  assert.equal(bytes(65712472064), "61.2 GiB");
  assert.equal(bytes(512), "512 B");
  assert.equal(bytes(2199023255552), "2.00 TiB");
  assert.equal(bytes(null), NA);
  assert.equal(kwh(4.5e7), "12.5 kWh");
  assert.equal(kwh(3.6e9), "1,000 kWh");
  assert.equal(kwh(0), "0 kWh");
  assert.equal(kwh(1800), "0.500 Wh");
  assert.equal(kwh(null), NA);
  assert.equal(amount(1.0243), "1.02");
  assert.equal(amount(1234.5), "1,235");
  assert.equal(amount(undefined), NA);
});
