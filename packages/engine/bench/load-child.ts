// One resident load in a fresh process (so page faults and peak RSS are this load's): prints its stats as JSON.
// usage: node --import tsx bench/load-child.ts DIR pool|per-tensor [none|huge|populate] [ceiling]
//        node --import tsx bench/load-child.ts DIR ceiling disk|fresh-direct|fresh-buffered|backing   (one ceiling alone, no load)
import { readConfig } from "../src/config.js";
import { Model, residentNames } from "../src/model.js";
import { openWeights, residentCeiling, type ResidentCeilingKind } from "../src/weights.js";

const [dir, method, prefault = "populate", ceiling] = process.argv.slice(2);
if (method === "ceiling") {
  const src = openWeights(dir);
  const names = residentNames(src, readConfig(dir), () => true, true);
  const c = residentCeiling(src, names, prefault as ResidentCeilingKind);
  src.close();
  process.stdout.write(JSON.stringify({ ...c, peakRss: process.resourceUsage().maxRSS * 1024 }) + "\n");
} else {
  const t0 = performance.now();
  const m = Model.load(dir, { preload: method === "per-tensor" ? false : { prefault: prefault as "none" | "huge" | "populate", ceiling: ceiling === "ceiling" } });
  const wall = (performance.now() - t0) / 1000;
  const s = m.loadStats!;
  process.stdout.write(JSON.stringify({ ...s, wallWithSetup: wall, peakRss: process.resourceUsage().maxRSS * 1024 }) + "\n");
  m.close();
}
