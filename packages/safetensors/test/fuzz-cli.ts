// Runs the mutation fuzzer from the command line: tsx test/fuzz-cli.ts <cases> [seed] [backends]
import { runFuzz } from "./fuzz.js";
import { fuzzSeeds } from "./seeds.js";
const backends = (process.argv[4] ?? "ts,native").split(",") as ("ts" | "native")[];
const r = runFuzz(fuzzSeeds(), Number(process.argv[2] ?? 300), Number(process.argv[3] ?? 1), backends);
console.log(JSON.stringify({ ...r, mismatches: r.mismatches.slice(0, 5), crashes: r.crashes.slice(0, 3), unexplainedAccepts: r.unexplainedAccepts.slice(0, 3), falseRejects: r.falseRejects.slice(0, 3) }, null, 1));
