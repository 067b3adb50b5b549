// One resident load in a fresh process (so page faults and peak RSS are this load's): prints its stats as JSON.
// usage: node --import tsx bench/load-child.ts DIR pool|per-tensor [none|huge|populate] [ceiling]
import { Model } from "../src/model.js";

const [dir, method, prefault = "populate", ceiling] = process.argv.slice(2);
const t0 = performance.now();
const m = Model.load(dir, { preload: method === "per-tensor" ? false : { prefault: prefault as "none" | "huge" | "populate", ceiling: ceiling === "ceiling" } });
const wall = (performance.now() - t0) / 1000;
const s = m.loadStats!;
process.stdout.write(JSON.stringify({ ...s, wallWithSetup: wall, peakRss: process.resourceUsage().maxRSS * 1024 }) + "\n");
m.close();
