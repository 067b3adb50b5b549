// Child process for the kill-during-pack test: packs slowly so the parent can kill it mid-way.
import { packTrunk } from "../src/trunk/trunk-pack.js";

const [src, out, delayMs] = process.argv.slice(2);
const sleeper = new Int32Array(new SharedArrayBuffer(4));
await packTrunk(src, out, { beforeGroup: () => Atomics.wait(sleeper, 0, 0, Number(delayMs)) });
console.log("finished");
