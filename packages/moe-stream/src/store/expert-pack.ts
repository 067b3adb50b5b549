/**
 * packExperts: an optional copy of the routed experts into ONE file where every expert starts on a
 * 4 KiB boundary, ordered by (layer, id), so every expert read is aligned (no superset) and a
 * layer's experts are adjacent. K3's experts are exactly 4,284 pages, so the padding is zero.
 * The store reads the original shards just as well (aligned-superset reads); this only saves the
 * at most 8 KiB per read of the superset and makes the file layout independent of the shards.
 *
 * Atomic (experts.bin.partial, then rename after a full crc32 verification) with a JSON index
 * (`experts.json`) that `openPackedExperts` turns back into ExpertLocations.
 */
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, readSync, renameSync, writeFileSync, writeSync } from "node:fs";
import { join, resolve } from "node:path";
import { crc32 } from "node:zlib";
import { openCheckpointIndex, type ExpertLocation } from "./checkpoint.js";
import { ChecksumError, CheckpointError, PackError } from "../errors.js";
import { ProgressMeter, type Progress } from "../io/progress.js";

export const EXPERTS_FILE = "experts.bin";
export const EXPERTS_INDEX = "experts.json";
const ALIGN = 4096;

interface PackedEntry extends Omit<ExpertLocation, "file"> {
  crc32: number;
}

export interface PackedExpertsIndex {
  format: "k3-experts";
  version: 1;
  align: number;
  file: string;
  bytes: number;
  experts: PackedEntry[];
}

function readExact(fd: number, buf: Uint8Array, offset: number, file: string): void {
  let got = 0;
  while (got < buf.length) {
    const n = readSync(fd, buf, got, buf.length - got, offset + got);
    if (n === 0) throw new CheckpointError(file, `short read: ${got} of ${buf.length} bytes at offset ${offset} (file truncated?)`);
    got += n;
  }
}

/** Copies the experts of `layers` (default: every MoE layer) into outDir/experts.bin + experts.json. */
export function packExperts(checkpointDir: string, outDir: string, opts: { layers?: number[]; onProgress?: (p: Progress) => void } = {}): PackedExpertsIndex {
  const ckpt = openCheckpointIndex(checkpointDir);
  const layers = opts.layers ?? [...new Set([...ckpt.tensors.keys()].map((n) => /\.layers\.(\d+)\..*\.experts\.\d+\./.exec(n)?.[1]).filter((x) => x !== undefined).map(Number))].sort((a, b) => a - b);
  const all = layers.flatMap((l) => ckpt.experts(l));
  if (all.length === 0) throw new CheckpointError(resolve(checkpointDir), "no routed experts to pack");
  mkdirSync(outDir, { recursive: true });
  const partial = join(outDir, EXPERTS_FILE + ".partial");
  const out = openSync(partial, "w");
  const meter = new ProgressMeter("pack experts", all.reduce((a, e) => a + Math.ceil(e.byteLength / ALIGN) * ALIGN, 0));
  const entries: PackedEntry[] = [];
  const fds = new Map<string, number>();
  let at = 0;
  try {
    for (const e of all) {
      let fd = fds.get(e.file);
      if (fd === undefined) fds.set(e.file, (fd = openSync(e.file, "r")));
      const padded = Math.ceil(e.byteLength / ALIGN) * ALIGN;
      const buf = new Uint8Array(padded);
      readExact(fd, buf.subarray(0, e.byteLength), e.offset, e.file);
      try {
        let off = 0;
        while (off < buf.length) off += writeSync(out, buf, off, buf.length - off, at + off);
      } catch (err) {
        const x = err as NodeJS.ErrnoException;
        throw new PackError(`cannot write layer ${e.layer} expert ${e.id} to ${partial}: ${x.message}`, x.code);
      }
      entries.push({ layer: e.layer, id: e.id, offset: at, byteLength: e.byteLength, tensors: e.tensors, crc32: crc32(buf.subarray(0, e.byteLength)) >>> 0 });
      at += padded;
      meter.add(padded);
      opts.onProgress?.(meter.snapshot(`layer ${e.layer} expert ${e.id}`));
    }
    fsyncSync(out);
  } finally {
    for (const fd of fds.values()) closeSync(fd);
    closeSync(out);
  }
  const index: PackedExpertsIndex = { format: "k3-experts", version: 1, align: ALIGN, file: EXPERTS_FILE, bytes: at, experts: entries };
  verifyPackedExperts(partial, index);
  writeFileSync(join(outDir, EXPERTS_INDEX + ".partial"), JSON.stringify(index));
  renameSync(partial, join(outDir, EXPERTS_FILE));
  renameSync(join(outDir, EXPERTS_INDEX + ".partial"), join(outDir, EXPERTS_INDEX));
  opts.onProgress?.(meter.snapshot("done", true));
  return index;
}

/** Re-reads every expert and checks its crc32. */
export function verifyPackedExperts(file: string, index: PackedExpertsIndex): void {
  const fd = openSync(file, "r");
  try {
    for (const e of index.experts) {
      const buf = new Uint8Array(e.byteLength);
      readExact(fd, buf, e.offset, file);
      const got = crc32(buf) >>> 0;
      if (got !== e.crc32) throw new ChecksumError(file, `layer ${e.layer} expert ${e.id}`, e.crc32, got);
    }
  } finally {
    closeSync(fd);
  }
}

/** ExpertLocations of a packed expert file (validated: aligned, in bounds, non-overlapping). */
export function openPackedExperts(dir: string): ExpertLocation[] {
  const file = join(resolve(dir), EXPERTS_INDEX);
  if (!existsSync(file)) throw new CheckpointError(file, "missing packed expert index (run packExperts first)");
  let index: PackedExpertsIndex;
  try {
    index = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new CheckpointError(file, `not valid JSON (${(e as Error).message})`);
  }
  if (index?.format !== "k3-experts" || index.version !== 1 || index.file !== EXPERTS_FILE || !Array.isArray(index.experts))
    throw new CheckpointError(file, "format must be k3-experts version 1 with an experts array");
  const bin = join(resolve(dir), EXPERTS_FILE);
  let end = 0;
  return index.experts.map((e, i) => {
    if (!Number.isSafeInteger(e.offset) || e.offset % ALIGN !== 0 || e.offset < end || !Number.isSafeInteger(e.byteLength) || e.byteLength <= 0 || e.offset + e.byteLength > index.bytes)
      throw new CheckpointError(file, `experts[${i}] (layer ${e.layer} expert ${e.id}): offset ${e.offset} / byteLength ${e.byteLength} is unaligned, overlapping or out of bounds`);
    end = e.offset + e.byteLength;
    return { layer: e.layer, id: e.id, file: bin, offset: e.offset, byteLength: e.byteLength, tensors: e.tensors };
  });
}
