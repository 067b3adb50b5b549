/**
 * `k3 download REPO --dir DIR`: fetches a checkpoint from a Hugging Face-compatible hub, verified:
 *
 * - The revision is pinned first (a branch or tag resolves to one commit sha, recorded in
 *   DIR/.k3-download.json), so a push during a 1.56 TB download cannot mix two revisions.
 * - Free space is checked before anything is written (what is left to fetch + 1 GiB).
 * - Every file is fetched into `<file>.part` with HTTP Range resume (a server that ignores the range
 *   restarts the file), hashed with SHA-256 while it streams (the part already on disk is hashed
 *   first), and renamed into place only when its size — and, for LFS files, its sha256 — match
 *   the hub's listing. A file already complete is re-hashed only with `verify: "full"`.
 * - Then the set is checked as the reference engine's script does: every shard index.json names is
 *   present, and the shard bytes add up to the listing.
 */
import { formatBytes } from "@k3/native";
import { createHash } from "node:crypto";
import { createReadStream, existsSync, mkdirSync, readFileSync, renameSync, statSync, statfsSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { dirname, join, relative, resolve, sep } from "node:path";
import { K3Error, UsageError, EXIT_IO } from "./errors.js";

/** A failed download (network, verification): io, exit 5; the message names the file. */
export class DownloadError extends K3Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, EXIT_IO, options);
  }
}

export interface DownloadOptions {
  /** owner/name on the hub. */
  repo: string;
  dir: string;
  /** Branch, tag or commit (default "main"); pinned to a commit before anything is fetched. */
  revision?: string;
  /** Hub URL (default $HF_ENDPOINT or https://huggingface.co). */
  endpoint?: string;
  /** Bearer token (default $HF_TOKEN). */
  token?: string;
  /** Only files whose name matches one of these globs (`*` and `?`); default all. */
  include?: string[];
  /** Files fetched at once (default 4). */
  concurrency?: number;
  /** "full" re-hashes files already complete on disk (default: trusted by size + the recorded hash).
   *  DIR/.k3-download.json records the sha256 of every complete file, for `k3 verify`. */
  verify?: "size" | "full";
  /** Progress callback: bytes done/total, rate, the file in flight. */
  onProgress?: (p: { bytesDone: number; bytesTotal: number; bytesResumed: number; rate: number; etaSeconds: number | null; file: string; done: boolean }) => void;
  log?: (line: string) => void;
  /** For tests: the free bytes the space check sees (default statfs of dir). */
  freeBytes?: number;
}

export interface HubFile {
  name: string;
  size: number;
  /** LFS files: the sha256 of the content. */
  sha256: string | null;
}

export interface DownloadResult {
  revision: string;
  files: HubFile[];
  /** Bytes fetched by this run, and skipped because they were already on disk. */
  fetchedBytes: number;
  resumedBytes: number;
  seconds: number;
}

const STATE_FILE = ".k3-download.json";
const FREE_MARGIN = 1 << 30;

// ---------------------------------------------------------------- hub API

function headers(token: string | undefined, extra: Record<string, string> = {}): Record<string, string> {
  return token ? { authorization: `Bearer ${token}`, ...extra } : extra;
}

async function hubJson(url: string, token: string | undefined): Promise<unknown> {
  let res: Response;
  try {
    res = await fetch(url, { headers: headers(token) });
  } catch (e) {
    throw new DownloadError(`${url}: ${(e as Error).message}${(e as { cause?: Error }).cause ? ` (${(e as { cause: Error }).cause.message})` : ""}`, { cause: e });
  }
  if (res.status === 401 || res.status === 403) throw new DownloadError(`${url}: HTTP ${res.status}: the repository needs a token (--token or $HF_TOKEN) with access to it`);
  if (res.status === 404) throw new DownloadError(`${url}: HTTP 404: no such repository or revision`);
  if (!res.ok) throw new DownloadError(`${url}: HTTP ${res.status} ${res.statusText}`);
  try {
    return await res.json();
  } catch {
    throw new DownloadError(`${url}: the hub's answer is not JSON`);
  }
}

/** The pinned commit and its file list (sizes, LFS hashes). */
export async function listRevision(endpoint: string, repo: string, revision: string, token?: string): Promise<{ sha: string; files: HubFile[] }> {
  const url = `${endpoint}/api/models/${repo}/revision/${encodeURIComponent(revision)}?blobs=true`;
  const j = (await hubJson(url, token)) as { sha?: unknown; siblings?: unknown };
  if (typeof j?.sha !== "string" || !/^[0-9a-f]{40}$/.test(j.sha)) throw new DownloadError(`${url}: no commit sha in the answer`);
  if (!Array.isArray(j.siblings)) throw new DownloadError(`${url}: no file list (siblings) in the answer`);
  const files = j.siblings.map((s: { rfilename?: unknown; size?: unknown; lfs?: { sha256?: unknown; size?: unknown } }, i: number): HubFile => {
    const name = s?.rfilename;
    const size = s?.lfs?.size ?? s?.size;
    if (typeof name !== "string" || !safeName(name)) throw new DownloadError(`${url}: file ${i} has an unsafe or missing name ${JSON.stringify(name)}`);
    if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0) throw new DownloadError(`${url}: ${name} has no size (ask with ?blobs=true)`);
    const sha = s.lfs?.sha256;
    if (sha !== undefined && (typeof sha !== "string" || !/^[0-9a-f]{64}$/.test(sha))) throw new DownloadError(`${url}: ${name} has a malformed sha256`);
    return { name, size, sha256: typeof sha === "string" ? sha : null };
  });
  return { sha: j.sha, files };
}

/** A relative path that stays inside the target directory. */
function safeName(name: string): boolean {
  if (name === "" || name.startsWith("/") || name.includes("\\") || name.includes("\0")) return false;
  return name.split("/").every((p) => p !== "" && p !== "." && p !== "..");
}

function globToRegExp(glob: string): RegExp {
  return new RegExp(`^${glob.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".")}$`);
}

// ---------------------------------------------------------------- one file

async function hashFile(path: string, h: ReturnType<typeof createHash>): Promise<void> {
  for await (const chunk of createReadStream(path, { highWaterMark: 8 << 20 })) h.update(chunk as Buffer);
}

/** Fetches one file into place (resuming a .part), verifying size and sha256. Returns the bytes fetched now and the file's sha256. */
async function fetchFile(o: { url: string; token?: string; file: HubFile; path: string; onBytes: (n: number) => void }): Promise<{ got: number; sha256: string }> {
  const part = `${o.path}.part`;
  mkdirSync(dirname(o.path), { recursive: true });
  const h = createHash("sha256");
  let have = existsSync(part) ? statSync(part).size : 0;
  if (have > o.file.size) have = 0; // a stale part from another revision: start over
  if (have > 0) await hashFile(part, h);
  let res: Response;
  try {
    res = await fetch(o.url, { headers: headers(o.token, have > 0 ? { range: `bytes=${have}-` } : {}), redirect: "follow" });
  } catch (e) {
    throw new DownloadError(`${o.file.name}: ${(e as Error).message}`, { cause: e });
  }
  let restart = false;
  if (have > 0 && res.status === 200) restart = true; // the server ignored the range
  else if (have > 0 && res.status === 206 && !(res.headers.get("content-range") ?? "").startsWith(`bytes ${have}-`))
    throw new DownloadError(`${o.file.name}: asked for bytes ${have}- but the server answered ${JSON.stringify(res.headers.get("content-range"))}`);
  else if (have > 0 && res.status === 416 && have === o.file.size) {
    // Complete already; fall through to verification.
  } else if (!(res.status === 200 || res.status === 206)) throw new DownloadError(`${o.file.name}: HTTP ${res.status} ${res.statusText}`);
  const fh = await open(part, restart || have === 0 ? "w" : "a");
  let got = 0;
  const hash = restart ? createHash("sha256") : h;
  try {
    if (res.status !== 416 && res.body) {
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        await fh.write(value);
        hash.update(value);
        got += value.byteLength;
        o.onBytes(value.byteLength);
        if ((restart ? 0 : have) + got > o.file.size) throw new DownloadError(`${o.file.name}: the server sent more than the listed ${o.file.size} bytes`);
      }
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
  const total = (restart ? 0 : have) + got;
  if (total !== o.file.size) throw new DownloadError(`${o.file.name}: got ${total} of ${o.file.size} bytes (connection cut? run again to resume)`);
  const digest = hash.digest("hex");
  if (o.file.sha256 && digest !== o.file.sha256) {
    renameSync(part, `${part}.bad`);
    throw new DownloadError(`${o.file.name}: sha256 ${digest} but the hub lists ${o.file.sha256}; the bytes were kept as ${relative(dirname(o.path), part)}.bad and the file will be fetched again`);
  }
  renameSync(part, o.path);
  return { got, sha256: digest };
}

// ---------------------------------------------------------------- the whole set

/** Downloads (or completes) the checkpoint; throws DownloadError / UsageError naming the file. */
export async function downloadCheckpoint(opts: DownloadOptions): Promise<DownloadResult> {
  const t0 = performance.now();
  if (!/^[A-Za-z0-9][\w.-]*\/[\w.-]+$/.test(opts.repo)) throw new UsageError(`download: ${JSON.stringify(opts.repo)} is not a repository name (owner/name)`);
  const endpoint = (opts.endpoint ?? process.env.HF_ENDPOINT ?? "https://huggingface.co").replace(/\/+$/, "");
  const token = opts.token ?? process.env.HF_TOKEN;
  const dir = resolve(opts.dir);
  mkdirSync(dir, { recursive: true });
  const log = opts.log ?? (() => {});
  const statePath = join(dir, STATE_FILE);
  const prior = existsSync(statePath) ? (JSON.parse(readFileSync(statePath, "utf8")) as { repo: string; sha: string; complete?: Record<string, string> }) : null;

  // 1. Pin the revision (a directory started at one commit keeps it).
  const wanted = opts.revision ?? prior?.sha ?? "main";
  if (prior && prior.repo !== opts.repo) throw new UsageError(`download: ${dir} holds ${prior.repo}, not ${opts.repo}`);
  const { sha, files: all } = await listRevision(endpoint, opts.repo, wanted, token);
  if (prior && prior.sha !== sha) throw new UsageError(`download: ${dir} was started at ${prior.sha}; ${wanted} is ${sha}. Use another directory (or --revision ${prior.sha})`);
  log(`${opts.repo} @ ${sha}${wanted !== sha ? ` (${wanted})` : ""}: ${all.length} files`);
  const include = opts.include?.map(globToRegExp);
  const files = include ? all.filter((f) => include.some((r) => r.test(f.name))) : all;
  const complete: Record<string, string> = prior?.complete ?? {};
  const save = () => writeFileSync(statePath, JSON.stringify({ repo: opts.repo, sha, complete }, null, 1) + "\n");
  save();

  // 2. What is already done, and the space for the rest.
  const todo: HubFile[] = [];
  let resumed = 0;
  for (const f of files) {
    const path = join(dir, ...f.name.split("/"));
    if (!path.startsWith(dir + sep)) throw new DownloadError(`${f.name}: resolves outside ${dir}`);
    // Complete files are trusted by size when this tool fetched them; others (a copy, another
    // tool's download) and every file under verify "full" are hashed against the listing first.
    const trusted = complete[f.name] !== undefined && opts.verify !== "full";
    const digest = existsSync(path) && statSync(path).size === f.size ? (trusted ? complete[f.name] : await verifyWhole(path, f)) : null;
    if (digest) {
      complete[f.name] = digest;
      resumed += f.size;
      continue;
    }
    if (existsSync(`${path}.part`)) resumed += Math.min(statSync(`${path}.part`).size, f.size);
    todo.push(f);
  }
  save();
  const total = files.reduce((a, f) => a + f.size, 0);
  const need = total - resumed;
  const free = opts.freeBytes ?? (() => {
    const s = statfsSync(dir);
    return s.bavail * s.bsize;
  })();
  if (need + FREE_MARGIN > free) throw new DownloadError(`download: ${formatBytes(need)} still to fetch (+ 1 GiB margin) but ${dir} has ${formatBytes(free)} free`);
  log(`${todo.length} of ${files.length} files to fetch, ${formatBytes(need)} (${formatBytes(resumed)} already on disk)`);

  // 3. Fetch, `concurrency` files at a time, largest first (the tail is small files).
  let fetched = 0;
  let inFlight = "";
  const t1 = performance.now();
  const progress = (finished = false) => {
    const secs = (performance.now() - t1) / 1000;
    const rate = secs > 0 ? fetched / secs : 0;
    opts.onProgress?.({ bytesDone: resumed + fetched, bytesTotal: total, bytesResumed: resumed, rate, etaSeconds: rate > 0 ? (total - resumed - fetched) / rate : null, file: inFlight, done: finished });
  };
  const queue = [...todo].sort((a, b) => b.size - a.size);
  const workers = Array.from({ length: Math.max(1, Math.min(opts.concurrency ?? 4, queue.length)) }, async () => {
    for (let f = queue.shift(); f; f = queue.shift()) {
      inFlight = f.name;
      const path = join(dir, ...f.name.split("/"));
      const url = `${endpoint}/${opts.repo}/resolve/${sha}/${f.name.split("/").map(encodeURIComponent).join("/")}`;
      // The sha256 of every file (non-LFS ones too: the hub lists none for them), for k3 verify.
      complete[f.name] = (await fetchFile({ url, token, file: f, path, onBytes: (n) => ((fetched += n), progress()) })).sha256;
      save();
    }
  });
  const results = await Promise.allSettled(workers);
  progress(true);
  const failed = results.find((r) => r.status === "rejected") as PromiseRejectedResult | undefined;
  if (failed) throw failed.reason;

  // 4. The set: every shard index.json names is here, and the shards add up.
  const index = files.find((f) => f.name.endsWith(".safetensors.index.json"));
  if (index) {
    const map = (JSON.parse(readFileSync(join(dir, index.name), "utf8")) as { weight_map?: Record<string, string> }).weight_map ?? {};
    const shards = [...new Set(Object.values(map))];
    const missing = shards.filter((s) => !existsSync(join(dir, dirname(index.name), s)));
    if (missing.length && !include) throw new DownloadError(`${index.name} names ${missing.length} shard(s) the hub listing does not have (${missing.slice(0, 3).join(", ")})`);
    log(`${shards.length - missing.length} of ${shards.length} shards present${missing.length ? ` (${missing.length} not included by --include)` : ""}`);
  }
  return { revision: sha, files, fetchedBytes: fetched, resumedBytes: resumed, seconds: (performance.now() - t0) / 1000 };
}

/** The file's sha256 when it matches the listing (any, for a file the hub lists no hash of), else null. */
async function verifyWhole(path: string, f: HubFile): Promise<string | null> {
  const h = createHash("sha256");
  await hashFile(path, h);
  const digest = h.digest("hex");
  return !f.sha256 || digest === f.sha256 ? digest : null;
}
