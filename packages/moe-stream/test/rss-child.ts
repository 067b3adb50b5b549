// Child for the RSS test: opens a store over a test checkpoint, reads every expert, prints RSS figures.
import { readFileSync } from "node:fs";
import { openCheckpointIndex } from "../src/store/checkpoint.js";
import { ExpertStore } from "../src/store/expert-store.js";

const rss = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))![1]) * 1024;
const [dir, layersArg] = process.argv.slice(2);
const layers = layersArg.split(",").map(Number);
const experts = layers.flatMap((l) => openCheckpointIndex(dir).experts(l));
// A collection now, so none shrinks the JS heap between the two readings (RSS is the whole process).
(globalThis as { gc?: () => void }).gc?.();
const before = rss();
const store = ExpertStore.open({ experts, slotsPerLayer: 8, ioSlots: 6, readers: 4 });
const afterOpen = rss();
for (let round = 0; round < 3; round++)
  for (const l of layers) for await (const h of store.request(l, experts.filter((e) => e.layer === l).map((e) => e.id)).completed()) h.release();
const afterReads = rss();
console.log(JSON.stringify({ before, afterOpen, afterReads, arena: store.arenaBytes, reads: store.stats().reads }));
store.close();
