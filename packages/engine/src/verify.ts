/**
 * `k3 verify --model DIR`: hashes every checkpoint file (SHA-256) and compares it with what the
 * download recorded, so corrupted bytes (a flipped expert nibble, a zeroed block) are found before
 * they give a silently different answer.
 *
 * - Expected hashes: `--manifest FILE` (a `SHA256SUMS` listing, `<hex>  <name>` per line, or a JSON
 *   object name -> hex), else DIR/.k3-download.json (`k3 download` records the sha256 of every file
 *   it fetched), else DIR/SHA256SUMS. A file recorded by size only (an older download of a
 *   non-LFS file) is checked by size and said so.
 * - Speed: files are hashed on worker threads (one per core, largest first), each reading in
 *   16 MiB blocks at 16 MiB-aligned offsets with the next block's read in flight while the current
 *   one is hashed (OpenSSL's SHA-256, SHA-NI where the CPU has it).
 * - Resumable: each finished file's result is kept in DIR/.k3-verify.json (or `--state FILE`) with
 *   the file's size, mtime and inode; a rerun skips files whose record still matches. The unit of
 *   resumption is the file: Node's hash state cannot be saved mid-file, so an interrupted run
 *   loses at most the files in flight.
 * - A bad file is named with its expected and actual hash and, for a .safetensors shard, the
 *   tensors it holds; missing files are named too. Any of either: exit 5 (io).
 */
import { closeSync, existsSync, fstatSync, openSync, readSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, resolve, sep } from "node:path";
import { Worker } from "node:worker_threads";
import { formatBytes } from "@k3/native";
import { K3Error, EXIT_IO, UsageError } from "./errors.js";

/** Bad or missing files: io, exit 5; the message lists each. */
export class VerifyError extends K3Error {
  constructor(message: string, readonly bad: VerifiedFile[]) {
    super(message, EXIT_IO);
  }
}

export interface ExpectedFile {
  name: string;
  /** Hex SHA-256, or null when only the size is known. */
  sha256: string | null;
  size: number | null;
}

export interface VerifiedFile {
  name: string;
  status: "ok" | "bad" | "missing" | "size-only" | "size-mismatch" | "unreadable";
  size: number | null;
  expected: string | null;
  actual: string | null;
  /** True when the result comes from the state file of an earlier run. */
  resumed: boolean;
  /** For a bad .safetensors shard: the tensors it holds (or why they could not be listed). */
  tensors?: string[];
  detail?: string;
}

export interface VerifyProgress {
  bytesDone: number;
  bytesTotal: number;
  bytesResumed: number;
  rate: number;
  etaSeconds: number | null;
  file: string;
  done: boolean;
}

export interface VerifyOptions {
  dir: string;
  /** A SHA256SUMS or JSON manifest instead of the download's record. */
  manifest?: string;
  /** The resume state (default DIR/.k3-verify.json). */
  stateFile?: string;
  /** Ignore earlier results and hash everything again. */
  restart?: boolean;
  /** Hashing threads (default: available cores). */
  threads?: number;
  /** Read block in bytes (default 16 MiB). */
  blockBytes?: number;
  signal?: AbortSignal;
  onProgress?: (p: VerifyProgress) => void;
  log?: (line: string) => void;
}

export interface VerifyResult {
  source: string;
  files: VerifiedFile[];
  /** Bytes hashed by this run, and skipped because an earlier run had verified them. */
  hashedBytes: number;
  resumedBytes: number;
  seconds: number;
  /** hashedBytes / seconds / 1e9. */
  gbps: number;
  interrupted: boolean;
}

export const VERIFY_STATE = ".k3-verify.json";
const DOWNLOAD_STATE = ".k3-download.json";
const BLOCK = 16 << 20;
const HEX64 = /^[0-9a-f]{64}$/;

// ---------------------------------------------------------------- what the files should hash to

/** A relative path that stays inside the checkpoint directory. */
function safeName(name: string): boolean {
  if (name === "" || name.startsWith("/") || name.includes("\\") || name.includes("\0")) return false;
  return name.split("/").every((p) => p !== "" && p !== "." && p !== "..");
}

function parseSums(text: string, where: string): ExpectedFile[] {
  const out: ExpectedFile[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (line.trim() === "" || line.startsWith("#")) return;
    const m = /^([0-9a-fA-F]{64}) [ *](.+)$/.exec(line);
    if (!m) throw new UsageError(`${where}, line ${i + 1}: expected '<64 hex digits>  <file name>', got ${JSON.stringify(line.slice(0, 80))}`);
    out.push({ name: m[2].replace(/^\.\//, ""), sha256: m[1].toLowerCase(), size: null });
  });
  return out;
}

function fromJson(value: unknown, where: string): ExpectedFile[] {
  const map = (value as { complete?: unknown })?.complete ?? value;
  if (typeof map !== "object" || map === null || Array.isArray(map)) throw new UsageError(`${where}: expected an object of file name -> sha256`);
  return Object.entries(map as Record<string, unknown>).map(([name, v]) => {
    if (typeof v === "string" && HEX64.test(v.toLowerCase())) return { name, sha256: v.toLowerCase(), size: null };
    const size = typeof v === "string" ? /^size:(\d+)$/.exec(v) : null;
    if (size) return { name, sha256: null, size: Number(size[1]) };
    throw new UsageError(`${where}: ${name}: expected a sha256 (64 hex digits) or "size:N", got ${JSON.stringify(v)}`);
  });
}

function readManifest(file: string): ExpectedFile[] {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new UsageError(`--manifest ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, { cause: e });
  }
  if (text.trimStart().startsWith("{")) {
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch (e) {
      throw new UsageError(`${file}: not valid JSON (${(e as Error).message})`, { cause: e });
    }
    return fromJson(v, file);
  }
  return parseSums(text, file);
}

/** The expected hashes and where they came from. */
export function expectedFiles(dir: string, manifest?: string): { source: string; files: ExpectedFile[] } {
  let source: string;
  let files: ExpectedFile[];
  if (manifest !== undefined) {
    files = readManifest(resolve(manifest));
    source = resolve(manifest);
  } else if (existsSync(join(dir, DOWNLOAD_STATE))) {
    source = join(dir, DOWNLOAD_STATE);
    files = readManifest(source);
  } else if (existsSync(join(dir, "SHA256SUMS"))) {
    source = join(dir, "SHA256SUMS");
    files = readManifest(source);
  } else {
    throw new UsageError(`k3 verify: ${dir} has no record of its files' hashes (${DOWNLOAD_STATE} from k3 download, or SHA256SUMS); give --manifest FILE`);
  }
  for (const f of files) if (!safeName(f.name)) throw new UsageError(`${source}: unsafe file name ${JSON.stringify(f.name)}`);
  if (files.length === 0) throw new UsageError(`${source}: lists no files`);
  return { source, files };
}

// ---------------------------------------------------------------- resume state

interface StateRecord {
  size: number;
  mtimeMs: number;
  ino: number;
  expected: string;
  actual: string;
}

function loadState(path: string, restart: boolean): Record<string, StateRecord> {
  if (restart || !existsSync(path)) return {};
  try {
    const v = JSON.parse(readFileSync(path, "utf8")) as { version?: number; files?: Record<string, StateRecord> };
    return v.version === 1 && v.files && typeof v.files === "object" ? v.files : {};
  } catch {
    return {}; // a torn or foreign state file: start over
  }
}

// ---------------------------------------------------------------- hashing threads

// A CommonJS worker (eval: no separate file to resolve from sources or the bundle). Reads block
// k + 1 (libuv thread) while hashing block k; posts the bytes hashed after every block.
const WORKER = `
const { parentPort, workerData } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const fs = require("node:fs/promises");
const block = workerData.block;
const bufs = [Buffer.allocUnsafeSlow(block), Buffer.allocUnsafeSlow(block)];
parentPort.on("message", async ({ id, path }) => {
  let fh;
  try {
    fh = await fs.open(path, "r");
    const size = (await fh.stat()).size;
    const h = createHash("sha256");
    let pos = 0, k = 0;
    let pending = size > 0 ? fh.read(bufs[0], 0, Math.min(block, size), 0) : null;
    while (pending) {
      const { bytesRead } = await pending;
      if (bytesRead === 0) throw new Error("file shrank while being read (" + pos + " of " + size + " bytes)");
      const cur = bufs[k & 1];
      pos += bytesRead;
      k++;
      pending = pos < size ? fh.read(bufs[k & 1], 0, Math.min(block, size - pos), pos) : null;
      h.update(cur.subarray(0, bytesRead));
      parentPort.postMessage({ id, bytes: bytesRead });
    }
    parentPort.postMessage({ id, done: h.digest("hex"), size });
  } catch (e) {
    parentPort.postMessage({ id, error: e.code || e.message });
  } finally {
    if (fh) await fh.close();
  }
});
`;

interface Job {
  name: string;
  path: string;
  size: number;
  resolve: (r: { sha256: string; size: number } | { error: string }) => void;
}

class HashPool {
  private workers: Worker[] = [];
  private queue: Job[] = [];
  private idle: Worker[] = [];
  private jobs = new Map<number, Job>();
  private nextId = 0;
  constructor(n: number, block: number, private onBytes: (name: string, bytes: number) => void) {
    for (let i = 0; i < n; i++) {
      const w = new Worker(WORKER, { eval: true, workerData: { block } });
      w.on("message", (m: { id: number; bytes?: number; done?: string; size?: number; error?: string }) => {
        const job = this.jobs.get(m.id)!;
        if (m.bytes !== undefined) return this.onBytes(job.name, m.bytes);
        this.jobs.delete(m.id);
        job.resolve(m.error !== undefined ? { error: m.error } : { sha256: m.done!, size: m.size! });
        this.idle.push(w);
        this.pump();
      });
      this.workers.push(w);
      this.idle.push(w);
    }
  }
  hash(name: string, path: string, size: number): Promise<{ sha256: string; size: number } | { error: string }> {
    return new Promise((res) => {
      this.queue.push({ name, path, size, resolve: res });
      this.pump();
    });
  }
  /** Drops what has not started (an interrupt): those promises never settle. */
  drain(): void {
    this.queue.length = 0;
  }
  get busy(): string[] {
    return [...this.jobs.values()].map((j) => j.name);
  }
  private pump(): void {
    while (this.idle.length && this.queue.length) {
      const w = this.idle.pop()!;
      const job = this.queue.shift()!;
      const id = this.nextId++;
      this.jobs.set(id, job);
      w.postMessage({ id, path: job.path });
    }
  }
  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

// ---------------------------------------------------------------- what a bad shard holds

/** The tensor names of a .safetensors file's header (it may itself be the corrupted part). */
export function tensorsOf(path: string): string[] {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const head = Buffer.alloc(8);
    if (size < 8 || readSync(fd, head, 0, 8, 0) !== 8) return ["(header unreadable: file shorter than 8 bytes)"];
    const len = Number(head.readBigUInt64LE(0));
    if (len > 100_000_000 || 8 + len > size) return [`(header unreadable: length ${len} does not fit the ${size}-byte file)`];
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, 8);
    try {
      return Object.keys(JSON.parse(buf.toString("utf8"))).filter((k) => k !== "__metadata__");
    } catch {
      return ["(header unreadable: not valid JSON; the header itself is damaged)"];
    }
  } finally {
    closeSync(fd);
  }
}

// ---------------------------------------------------------------- the run

export async function verifyCheckpoint(opts: VerifyOptions): Promise<VerifyResult> {
  const t0 = performance.now();
  const dir = resolve(opts.dir);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new UsageError(`k3 verify: ${dir} is not a directory`);
  const log = opts.log ?? (() => {});
  const { source, files } = expectedFiles(dir, opts.manifest);
  const statePath = opts.stateFile ? resolve(opts.stateFile) : join(dir, VERIFY_STATE);
  const state = loadState(statePath, !!opts.restart);
  let stateWritable = true;
  const saveState = () => {
    if (!stateWritable) return;
    try {
      writeFileSync(statePath + ".tmp", JSON.stringify({ version: 1, source, files: state }, null, 1) + "\n");
      renameSync(statePath + ".tmp", statePath);
    } catch (e) {
      stateWritable = false;
      log(`warning: cannot write ${statePath} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}): this run cannot be resumed; --state FILE puts it elsewhere`);
    }
  };

  const results: VerifiedFile[] = [];
  const todo: { f: ExpectedFile; path: string; size: number; mtimeMs: number; ino: number }[] = [];
  let resumedBytes = 0;
  for (const f of files) {
    const path = join(dir, ...f.name.split("/"));
    if (!path.startsWith(dir + sep)) throw new UsageError(`${source}: ${f.name} resolves outside ${dir}`);
    let st;
    try {
      st = statSync(path);
    } catch {
      results.push({ name: f.name, status: "missing", size: null, expected: f.sha256, actual: null, resumed: false });
      continue;
    }
    if (!st.isFile()) {
      results.push({ name: f.name, status: "unreadable", size: null, expected: f.sha256, actual: null, resumed: false, detail: "not a regular file" });
      continue;
    }
    if (f.sha256 === null) {
      const ok = f.size === null || f.size === st.size;
      results.push({ name: f.name, status: ok ? "size-only" : "size-mismatch", size: st.size, expected: f.size === null ? null : `size:${f.size}`, actual: `size:${st.size}`, resumed: false });
      continue;
    }
    const rec = state[f.name];
    if (rec && rec.size === st.size && rec.mtimeMs === st.mtimeMs && rec.ino === st.ino && rec.expected === f.sha256) {
      results.push({ name: f.name, status: rec.actual === f.sha256 ? "ok" : "bad", size: st.size, expected: f.sha256, actual: rec.actual, resumed: true });
      resumedBytes += st.size;
      continue;
    }
    todo.push({ f, path, size: st.size, mtimeMs: st.mtimeMs, ino: st.ino });
  }

  const total = resumedBytes + todo.reduce((a, t) => a + t.size, 0);
  let hashed = 0;
  const t1 = performance.now();
  let lastFile = "";
  const progress = (done = false) => {
    const secs = (performance.now() - t1) / 1000;
    const rate = secs > 0 ? hashed / secs : 0;
    opts.onProgress?.({ bytesDone: resumedBytes + hashed, bytesTotal: total, bytesResumed: resumedBytes, rate, etaSeconds: rate > 0 ? (total - resumedBytes - hashed) / rate : null, file: lastFile, done });
  };
  log(`${files.length} files listed in ${source}; ${todo.length} to hash (${formatBytes(total - resumedBytes)})${resumedBytes ? `, ${results.filter((r) => r.resumed).length} verified by an earlier run` : ""}`);

  // Largest first: the small files fill in at the end instead of one big file running alone.
  todo.sort((a, b) => b.size - a.size);
  const threads = Math.max(1, Math.min(opts.threads ?? availableParallelism(), todo.length || 1));
  const pool = new HashPool(threads, opts.blockBytes ?? BLOCK, (name, n) => {
    hashed += n;
    lastFile = name;
    progress();
  });
  let interrupted = false;
  try {
    const all = Promise.all(
      todo.map(async (t) => {
        const r = await pool.hash(t.f.name, t.path, t.size);
        if ("error" in r) {
          results.push({ name: t.f.name, status: "unreadable", size: t.size, expected: t.f.sha256, actual: null, resumed: false, detail: r.error });
          return;
        }
        const ok = r.sha256 === t.f.sha256;
        results.push({ name: t.f.name, status: ok ? "ok" : "bad", size: r.size, expected: t.f.sha256, actual: r.sha256, resumed: false });
        state[t.f.name] = { size: t.size, mtimeMs: t.mtimeMs, ino: t.ino, expected: t.f.sha256!, actual: r.sha256 };
        saveState();
      }),
    );
    const aborted = new Promise<void>((res) => {
      if (opts.signal?.aborted) res();
      opts.signal?.addEventListener("abort", () => res(), { once: true });
    });
    await Promise.race([all, aborted.then(() => (interrupted = true))]);
    if (interrupted) pool.drain();
  } finally {
    await pool.close();
  }
  progress(true);
  for (const r of results) {
    if (r.status === "bad" && r.name.endsWith(".safetensors")) {
      try {
        r.tensors = tensorsOf(join(dir, ...r.name.split("/")));
      } catch (e) {
        r.tensors = [`(cannot read: ${(e as Error).message})`];
      }
    }
  }
  const order = new Map(files.map((f, i) => [f.name, i]));
  results.sort((a, b) => order.get(a.name)! - order.get(b.name)!);
  const seconds = (performance.now() - t0) / 1000;
  const hashSecs = (performance.now() - t1) / 1000;
  return { source, files: results, hashedBytes: hashed, resumedBytes, seconds, gbps: hashSecs > 0 ? hashed / hashSecs / 1e9 : 0, interrupted };
}

/** One line per file that is not ok (bad, missing, unreadable, size only), then a summary. */
export function formatVerify(r: VerifyResult): { lines: string[]; bad: VerifiedFile[] } {
  const lines: string[] = [];
  const bad = r.files.filter((f) => f.status === "bad" || f.status === "missing" || f.status === "unreadable" || f.status === "size-mismatch");
  for (const f of r.files) {
    if (f.status === "bad") {
      const t = f.tensors;
      const tensors = t ? `; it holds ${t.length} tensor(s): ${t.slice(0, 8).join(", ")}${t.length > 8 ? `, ... (${t.length - 8} more)` : ""}` : "";
      lines.push(`BAD      ${f.name}: sha256 ${f.actual}, expected ${f.expected}${f.resumed ? " (found by an earlier run)" : ""}${tensors}`);
    } else if (f.status === "missing") lines.push(`MISSING  ${f.name}`);
    else if (f.status === "unreadable") lines.push(`UNREADABLE ${f.name}: ${f.detail}`);
    else if (f.status === "size-mismatch") lines.push(`BAD      ${f.name}: ${f.actual?.slice(5)} bytes, expected ${f.expected?.slice(5)} (no sha256 recorded)`);
    else if (f.status === "size-only") lines.push(`size only ${f.name}: no sha256 recorded, size checked`);
  }
  const ok = r.files.filter((f) => f.status === "ok").length;
  lines.push(
    `${r.interrupted ? "interrupted: " : ""}${ok} of ${r.files.length} files match their sha256${bad.length ? `, ${bad.length} bad or missing` : ""}; ` +
      `hashed ${formatBytes(r.hashedBytes)} in ${r.seconds.toFixed(1)} s (${r.gbps.toFixed(2)} GB/s)` +
      `${r.resumedBytes ? `, ${formatBytes(r.resumedBytes)} verified by an earlier run` : ""}${r.interrupted ? "; run again to continue" : ""}`,
  );
  return { lines, bad };
}
