import { describe, expect, it } from "vitest";
import { BACKENDS } from "./helpers.js";
import { runFuzz } from "./fuzz.js";
import { fuzzSeeds } from "./seeds.js";

describe("mutation fuzzer", () => {
  const cases = Number(process.env.K3_FUZZ_CASES ?? 3000);
  it(`${cases} mutated files: no crash, no unexplained accept, backends agree (${BACKENDS.join(" + ")})`, () => {
    const report = runFuzz(fuzzSeeds(), cases, 20261130, BACKENDS);
    console.log(`[fuzz] ${report.cases} cases, ${report.accepted} accepted, rejects by code ${JSON.stringify(report.rejectedByCode)}`);
    expect(report.crashes).toEqual([]);
    expect(report.unexplainedAccepts).toEqual([]);
    expect(report.falseRejects).toEqual([]);
    expect(report.mismatches.slice(0, 5)).toEqual([]);
    // The fuzzer must exercise both sides: some mutations stay valid, most are rejected.
    expect(report.accepted).toBeGreaterThan(0);
    expect(Object.keys(report.rejectedByCode).length).toBeGreaterThan(8);
  });
});
