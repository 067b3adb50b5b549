// Worker for worker-terminate.test.ts: reads a file through the native store as fast as it can,
// with read() and readChecked() in synchronous bursts, every landed read checked through view(),
// stats(), ref()/unref() and cancelPrefetch() on the way, until the parent terminates it mid-read.
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
const asked = new Map(); // id -> [offset, length]
let issued = 0;
let done = 0;
let failures = 0;
let cancelled = 0; // queued prefetches dropped by cancelPrefetch(): not failures
let wake = null;
const store = new binding.NativeExpertStore([file], SLOT_BYTES, SLOTS, 4, true, 1, false, (d) => {
  done++;
  const [offset, length] = asked.get(d.id);
  asked.delete(d.id);
  if (d.cancelled) cancelled++;
  else if (d.status !== 0) failures++;
  else {
    // The landed bytes, through a view of the slot, against the file.
    const got = new Uint8Array(store.view(d.slot * SLOT_BYTES, SLOT_BYTES), d.dataOffset, length);
    if (Buffer.compare(got, data.subarray(offset, offset + length)) !== 0) failures++;
  }
  free.push(d.slot);
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
    asked.set(id, [offset, length]);
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
  store.unref();
  store.ref();
  if (store.stats().reads < 0 || store.cancelPrefetch() < 0) failures++;
  if (round === 0) parentPort.postMessage({ type: "reading" });
  await new Promise((r) => setImmediate(r));
}
if (done < issued) await new Promise((r) => (wake = r));
store.close();
parentPort.postMessage({ type: "done", issued, done, failures, cancelled });
