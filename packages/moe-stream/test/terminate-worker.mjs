// Worker for worker-terminate.test.ts: reads a file through the native store as fast as it can,
// with read() and readChecked() in synchronous bursts, until the parent terminates it mid-read.
// Plain JavaScript, so a worker starts in milliseconds (no TypeScript loader to register).
// workerData: { file, reads } — reads 0 = forever; else stop after that many reads, wait for every
// completion and post what came back.
import { readFileSync } from "node:fs";
import { parentPort, workerData } from "node:worker_threads";
import { crc32 } from "node:zlib";
import { loadAddon } from "@k3/native";

const SLOTS = 16;
const SLOT_BYTES = 64 << 10; // takes any read of up to 60 KiB at any offset
const { binding } = loadAddon("@k3/moe-stream", import.meta.url);
const { file, reads } = workerData;
const data = readFileSync(file);
const free = [...Array(SLOTS).keys()];
let issued = 0;
let done = 0;
let failures = 0;
let wake = null;
const store = new binding.NativeExpertStore([file], SLOT_BYTES, SLOTS, 4, true, 1, false, (d) => {
  done++;
  free.push(d.slot);
  if (d.status !== 0 || d.cancelled) failures++;
  if (wake && done === issued) wake();
});
store.ref();

let seed = 12345;
const next = (n) => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) % n);

// One read per free slot (no two reads in flight share one); every fourth a checked load whose one
// tensor is the range read.
function burst() {
  while (free.length > 0 && (reads === 0 || issued < reads)) {
    const id = ++issued;
    const slot = free.pop();
    const length = 1 + next(60 << 10);
    const offset = next(data.length - length);
    if (id % 4 === 0) {
      const crc = crc32(data.subarray(offset, offset + length));
      store.readChecked(`load ${id}`, [["t", offset, length, crc]], [[id, 0, offset, length, slot]], false);
    } else {
      store.read(id, 0, offset, length, slot, id % 3 === 0);
    }
  }
}

for (let round = 0; reads === 0 || issued < reads; round++) {
  burst();
  if (round === 0) parentPort.postMessage({ type: "reading" });
  await new Promise((r) => setImmediate(r));
}
if (done < issued) await new Promise((r) => (wake = r));
store.close();
parentPort.postMessage({ type: "done", issued, done, failures });
