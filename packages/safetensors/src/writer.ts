/**
 * Streaming writers: tensors are added one at a time and go straight to disk, in the caller's
 * order (the K3 layout needs experts in lexicographic id order and an expert's tensors adjacent).
 * The header is padded with spaces to a multiple of 8, like the official writer, so the data
 * section is 8-aligned. Finishing is atomic: everything goes to a temp file that is renamed.
 *
 * The header goes before the data but is only known at the end, so data is written at
 * 8 + `headerReserve`; if the final header fits in the reserve it is padded to fill it (no copy),
 * otherwise the data is copied once behind the real header. Give `plan` (every tensor's name,
 * dtype and shape, in order) to write the exact header first and never copy.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, readSync, renameSync, rmSync, writeSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { DTYPES, MAX_SAFE, dtypeCode, shapeElements, tensorBytes, type Dtype } from "./dtypes.js";
import { SafetensorsError, ioError } from "./errors.js";
import { bytesOf } from "./io.js";
import { MAX_HEADER_LENGTH } from "./scan.js";
import { WriteQueue, type ByteQueue, type QueueFactory, type WriteQueueOptions } from "./write-queue.js";

/** addChunksAsync options (see SafetensorsWriter.addChunksAsync). */
export interface AsyncAddOptions extends WriteQueueOptions {
  /** Return once the pieces are queued; they are written by flush()/finishAsync(). */
  queued?: boolean;
}

export interface TensorSpec {
  name: string;
  dtype: Dtype;
  shape: readonly number[];
}

export interface WriterOptions {
  /** `__metadata__` (string -> string). */
  metadata?: Record<string, string>;
  /** Bytes reserved for the header before the data (rounded up to 8). Default 0 (copy at finish). */
  headerReserve?: number;
  /** Every tensor, in order: the header is written first and add() must follow the plan. */
  plan?: readonly TensorSpec[];
  /** fsync before the rename (default true). */
  fsync?: boolean;
  /**
   * The queue addChunksAsync writes through instead of a WriteQueue (needs `plan`: the header then
   * goes through it too, at position 0, so a sequential writer such as an O_DIRECT one sees the
   * whole file in order). add() and addChunks() refuse such a writer.
   */
  queue?: QueueFactory;
}

interface Entry {
  name: string;
  dtype: Dtype;
  shape: number[];
  begin: number;
  end: number;
}

function fail(detail: string, file: string, tensor?: string): never {
  throw new SafetensorsError("InvalidArgument", detail, { file, tensor });
}

/** Validates a tensor spec and returns its byte size. */
function specBytes(name: string, dtype: Dtype, shape: readonly number[], file: string): number {
  if (typeof name !== "string") fail("tensor name must be a string", file);
  if (name === "__metadata__") fail("__metadata__ is reserved and cannot name a tensor", file, name);
  if (!(name as unknown as { isWellFormed(): boolean }).isWellFormed()) fail("tensor name holds a lone surrogate (not encodable as UTF-8)", file, name);
  const code = dtypeCode(dtype);
  if (code < 0) fail(`unknown dtype ${JSON.stringify(dtype)}`, file, name);
  if (!Array.isArray(shape) || shape.some((d) => !Number.isSafeInteger(d) || d < 0)) fail("shape must be an array of non-negative safe integers", file, name);
  const elements = shapeElements(shape);
  if (elements < 0) fail("shape has more than 2^53-1 elements", file, name);
  const bytes = tensorBytes(code, elements);
  if (bytes === "overflow") fail("tensor needs more than 2^53-1 bytes", file, name);
  if (bytes === "misaligned") fail(`${elements} ${dtype} elements do not fill a whole number of bytes`, file, name);
  return bytes;
}

/** The header JSON padded with spaces to a multiple of 8 (or to exactly `padTo`). */
export function encodeHeader(entries: readonly Entry[], metadata: Record<string, string> | undefined, padTo = 0): Buffer {
  const parts: string[] = [];
  if (metadata && Object.keys(metadata).length) {
    for (const [k, v] of Object.entries(metadata)) if (typeof v !== "string") throw new SafetensorsError("InvalidArgument", `metadata value of ${JSON.stringify(k)} must be a string`);
    parts.push(`"__metadata__":${JSON.stringify(metadata)}`);
  }
  for (const e of entries) parts.push(`${JSON.stringify(e.name)}:{"dtype":"${e.dtype}","shape":[${e.shape.join(",")}],"data_offsets":[${e.begin},${e.end}]}`);
  const json = Buffer.from(`{${parts.join(",")}}`, "utf8");
  let n = Math.ceil(json.length / 8) * 8;
  if (padTo > 0) {
    if (padTo < json.length) throw new Error("header does not fit");
    n = padTo;
  }
  if (n > MAX_HEADER_LENGTH) throw new SafetensorsError("HeaderTooLarge", `the header would be ${n} bytes, above ${MAX_HEADER_LENGTH}`);
  const out = Buffer.alloc(8 + n, 0x20);
  out.writeBigUInt64LE(BigInt(n), 0);
  json.copy(out, 8);
  return out;
}

/** Writes one .safetensors file. */
export class SafetensorsWriter {
  readonly path: string;
  private readonly temp: string;
  private fd: number;
  private readonly entries: Entry[] = [];
  private readonly names = new Set<string>();
  private dataStart: number;
  private cursor = 0;
  private state: "open" | "finished" | "aborted" = "open";
  private readonly plan: readonly TensorSpec[] | null;
  private readonly metadata: Record<string, string> | undefined;
  private readonly doFsync: boolean;
  private busy = false;
  private queue: ByteQueue | null = null;
  /** The planned header, still to be pushed through a custom queue. */
  private headerPending: Buffer | null = null;

  constructor(path: string, options: WriterOptions = {}) {
    this.path = resolve(path);
    this.metadata = options.metadata;
    this.doFsync = options.fsync ?? true;
    this.plan = options.plan ?? null;
    mkdirSync(dirname(this.path), { recursive: true });
    this.temp = join(dirname(this.path), `.${basename(this.path)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`);
    try {
      this.fd = openSync(this.temp, "wx+");
    } catch (err) {
      throw ioError(this.temp, "creating the temp file", err);
    }
    if (this.plan) {
      const planned: Entry[] = [];
      let at = 0;
      const seen = new Set<string>();
      for (const t of this.plan) {
        if (seen.has(t.name)) fail("the plan lists this tensor twice", this.path, t.name);
        seen.add(t.name);
        const bytes = specBytes(t.name, t.dtype, t.shape, this.path);
        if (at + bytes > MAX_SAFE) fail("the file would exceed 2^53-1 bytes", this.path, t.name);
        planned.push({ name: t.name, dtype: t.dtype, shape: [...t.shape], begin: at, end: at + bytes });
        at += bytes;
      }
      const header = encodeHeader(planned, this.metadata);
      if (options.queue) {
        this.queue = options.queue(this.fd, this.temp);
        this.headerPending = header;
      } else this.writeAt(header, 0);
      this.dataStart = header.length;
    } else {
      if (options.queue) fail("a custom write queue needs a plan (the header is written first, through it)", this.path);
      const reserve = Math.ceil(Math.max(0, options.headerReserve ?? 0) / 8) * 8;
      this.dataStart = 8 + reserve;
    }
  }

  /** Tensors added so far. */
  get count(): number {
    return this.entries.length;
  }

  /** Data bytes written so far. */
  get dataBytes(): number {
    return this.cursor;
  }

  private writeAt(bytes: Uint8Array, position: number): void {
    if (this.headerPending) fail("this writer has a custom write queue: add tensors with addChunksAsync", this.path);
    let done = 0;
    while (done < bytes.length) {
      const n = Math.min(bytes.length - done, 1 << 30);
      try {
        done += writeSync(this.fd, bytes, done, n, position + done);
      } catch (err) {
        throw ioError(this.temp, `writing ${bytes.length} bytes at ${position}`, err);
      }
    }
  }

  /** Checks that `name` may be added next; returns its byte size. */
  private admit(name: string, dtype: Dtype, shape: readonly number[]): number {
    if (this.state !== "open") fail(`the writer is ${this.state}`, this.path, name);
    if (this.busy) fail("an addChunksAsync is still writing", this.path, name);
    const bytes = specBytes(name, dtype, shape, this.path);
    if (this.names.has(name)) fail("a tensor of this name was already added", this.path, name);
    if (this.plan) {
      const want = this.plan[this.entries.length];
      if (!want) fail("the plan has no more tensors", this.path, name);
      if (want.name !== name || want.dtype !== dtype || want.shape.length !== shape.length || want.shape.some((d, i) => d !== shape[i])) {
        fail(`the plan expects ${JSON.stringify(want.name)} ${want.dtype} [${want.shape.join(", ")}] next`, this.path, name);
      }
    }
    return bytes;
  }

  private commit(name: string, dtype: Dtype, shape: readonly number[], bytes: number): [number, number] {
    this.entries.push({ name, dtype, shape: [...shape], begin: this.cursor, end: this.cursor + bytes });
    this.names.add(name);
    this.cursor += bytes;
    return [this.cursor - bytes, this.cursor];
  }

  /** Adds a tensor; `data` must hold exactly shape x dtype bytes. Returns its data_offsets. */
  add(name: string, dtype: Dtype, shape: readonly number[], data: ArrayBufferView): [number, number] {
    const bytes = this.admit(name, dtype, shape);
    const view = bytesOf(data);
    if (view.byteLength !== bytes) fail(`${dtype} [${shape.join(", ")}] needs ${bytes} bytes but the data has ${view.byteLength}`, this.path, name);
    this.writeAt(view, this.dataStart + this.cursor);
    return this.commit(name, dtype, shape, bytes);
  }

  /**
   * Adds a tensor whose bytes arrive in pieces, in order (for tensors larger than one buffer can
   * hold: Node caps a typed array near 2^32 bytes and one write at 2^31-1). The pieces must add up
   * to exactly shape x dtype bytes; a piece past the end or a short total aborts the writer (its
   * temp file is removed) and throws, since the data section would be left inconsistent.
   */
  addChunks(name: string, dtype: Dtype, shape: readonly number[], chunks: Iterable<ArrayBufferView>): [number, number] {
    const bytes = this.admit(name, dtype, shape);
    let done = 0;
    try {
      for (const chunk of chunks) {
        const view = bytesOf(chunk);
        if (done + view.byteLength > bytes) fail(`${dtype} [${shape.join(", ")}] needs ${bytes} bytes but the pieces hold more (${done + view.byteLength} so far)`, this.path, name);
        this.writeAt(view, this.dataStart + this.cursor + done);
        done += view.byteLength;
      }
      if (done !== bytes) fail(`${dtype} [${shape.join(", ")}] needs ${bytes} bytes but the pieces hold ${done}`, this.path, name);
    } catch (err) {
      this.abort();
      throw err;
    }
    return this.commit(name, dtype, shape, bytes);
  }

  /**
   * addChunks with positioned writes in flight (a WriteQueue on libuv's thread pool: contiguous
   * pieces gathered into writes of `batchBytes`, default 32 MiB, cut at multiples of it in the file;
   * at most `inFlight` outstanding, default 4), so the caller produces the next piece while earlier
   * ones are written and the drive sees a queue. The queue is the writer's, shared by every tensor:
   * with `queued: true` this returns once the pieces are queued (no wait at the tensor's end; the
   * next tensor's pieces join the same batches) and the pieces must stay unchanged until `flush()`
   * or `finishAsync()` settles; otherwise it waits for its writes and a piece must stay unchanged
   * until the returned promise settles. No other add may start before it settles.
   */
  async addChunksAsync(name: string, dtype: Dtype, shape: readonly number[], chunks: Iterable<ArrayBufferView> | AsyncIterable<ArrayBufferView>, options: AsyncAddOptions = {}): Promise<[number, number]> {
    if (this.busy) fail("another addChunksAsync is still writing", this.path, name);
    const bytes = this.admit(name, dtype, shape);
    const queue = this.queueFor(options);
    let done = 0;
    const start = this.dataStart + this.cursor;
    this.busy = true;
    try {
      await this.pushHeader();
      for await (const chunk of chunks) {
        const view = bytesOf(chunk);
        if (done + view.byteLength > bytes) fail(`${dtype} [${shape.join(", ")}] needs ${bytes} bytes but the pieces hold more (${done + view.byteLength} so far)`, this.path, name);
        if (view.byteLength > 0) await queue.push(view, start + done);
        done += view.byteLength;
      }
      if (done !== bytes) fail(`${dtype} [${shape.join(", ")}] needs ${bytes} bytes but the pieces hold ${done}`, this.path, name);
      if (!options.queued) await queue.drain();
    } catch (err) {
      await queue.drain().catch(() => {});
      this.busy = false;
      this.abort();
      throw err;
    }
    this.busy = false;
    return this.commit(name, dtype, shape, bytes);
  }

  /** A custom queue's first bytes: the planned header. */
  private async pushHeader(): Promise<void> {
    const h = this.headerPending;
    if (!h || !this.queue) return;
    this.headerPending = null;
    await this.queue.push(h, 0);
  }

  private queueFor(options: AsyncAddOptions): ByteQueue {
    if (!this.queue) this.queue = new WriteQueue(this.fd, this.temp, { inFlight: options.inFlight, batchBytes: options.batchBytes });
    return this.queue;
  }

  /** Waits for every queued write (addChunksAsync with `queued`); rejects with the first failure (the writer is aborted). */
  async flush(): Promise<void> {
    if (!this.queue) return;
    try {
      await this.pushHeader();
      await this.queue.drain();
    } catch (err) {
      this.abort();
      throw err;
    }
  }

  /** flush(), then finish(). */
  async finishAsync(): Promise<string> {
    if (this.state !== "open") fail(`the writer is ${this.state}`, this.path);
    await this.flush();
    return this.finish();
  }

  /** Writes the header, syncs and renames the temp file into place. Returns the path. */
  finish(): string {
    if (this.state !== "open") fail(`the writer is ${this.state}`, this.path);
    if (this.busy) fail("an addChunksAsync is still writing", this.path);
    if ((this.queue && !this.queue.idle) || this.headerPending) fail("queued writes are pending: await flush() or use finishAsync()", this.path);
    try {
      if (this.plan) {
        if (this.entries.length !== this.plan.length) fail(`the plan has ${this.plan.length} tensors but ${this.entries.length} were added`, this.path);
      } else {
        const header = encodeHeader(this.entries, this.metadata);
        const reserve = this.dataStart - 8;
        if (header.length - 8 <= reserve && reserve > 0) {
          this.writeAt(encodeHeader(this.entries, this.metadata, reserve), 0);
        } else if (header.length === this.dataStart) {
          this.writeAt(header, 0);
        } else {
          this.relocate(header);
        }
      }
      this.queue?.close?.();
      if (this.doFsync) fsyncSync(this.fd);
      closeSync(this.fd);
      renameSync(this.temp, this.path);
      this.state = "finished";
      return this.path;
    } catch (err) {
      this.abort();
      throw err;
    }
  }

  /** Header larger than the reserve: write header + data into a second temp file. */
  private relocate(header: Buffer): void {
    const second = `${this.temp}.2`;
    let out: number;
    try {
      out = openSync(second, "wx+");
    } catch (err) {
      throw ioError(second, "creating the temp file", err);
    }
    try {
      writeSync(out, header, 0, header.length, 0);
      const chunk = Buffer.allocUnsafe(Math.min(16 << 20, Math.max(1, this.cursor)));
      let done = 0;
      while (done < this.cursor) {
        const n = readSync(this.fd, chunk, 0, Math.min(chunk.length, this.cursor - done), this.dataStart + done);
        if (n === 0) throw new SafetensorsError("ShortRead", "the temp file ended early", { file: this.temp });
        let w = 0;
        while (w < n) w += writeSync(out, chunk, w, n - w, header.length + done + w);
        done += n;
      }
    } catch (err) {
      closeSync(out);
      rmSync(second, { force: true });
      throw err;
    }
    closeSync(this.fd);
    rmSync(this.temp, { force: true });
    renameSync(second, this.temp);
    this.fd = out;
  }

  /** Drops the temp file; the target path is left untouched. */
  abort(): void {
    if (this.state !== "open") return;
    this.state = "aborted";
    const drop = () => {
      try {
        this.queue?.close?.();
      } catch {
        /* already closed */
      }
      try {
        closeSync(this.fd);
      } catch {
        /* already closed */
      }
      rmSync(this.temp, { force: true });
      rmSync(`${this.temp}.2`, { force: true });
    };
    // Writes still in flight must finish before the fd is closed (its number could be reused).
    if (this.queue && !this.queue.idle) void this.queue.drain().then(drop, drop);
    else drop();
  }
}

export interface ShardedWriterOptions {
  /** Start a new shard before a tensor that would push the current one past this many data bytes. */
  maxShardBytes?: number;
  /** Shard file name for shard i (0-based) of n; default model-0000{i+1}-of-0000{n}.safetensors. */
  shardName?: (index: number, count: number) => string;
  /** index.json "metadata" extras (total_size is always written). */
  indexMetadata?: Record<string, unknown>;
  /** `__metadata__` of every shard (e.g. {format: "pt"}). */
  shardMetadata?: Record<string, string>;
  headerReserve?: number;
  /** Every shard's write queue (see WriterOptions.queue; shards started with startShard only). */
  queue?: QueueFactory;
  /**
   * true (default): fsync each shard when it is finished; "finish": fsync every shard at finish(),
   * before the index is written (the drive keeps writing one shard back while the next is being
   * written; the index still appears only after all data is on disk); false: never.
   */
  fsync?: boolean | "finish";
}

export function defaultShardName(index: number, count: number): string {
  const pad = (v: number) => String(v).padStart(5, "0");
  return `model-${pad(index + 1)}-of-${pad(count)}.safetensors`;
}

/**
 * Writes a sharded checkpoint plus model.safetensors.index.json. Shards are written under
 * temporary names and renamed at finish(), when their count is known; the index goes last.
 */
export class ShardedCheckpointWriter {
  readonly dir: string;
  private readonly options: ShardedWriterOptions;
  private current: SafetensorsWriter | null = null;
  private readonly finished: string[] = [];
  private readonly weightMap: [string, number][] = [];
  private readonly names = new Set<string>();
  private totalBytes = 0;
  private readonly tag = `${process.pid}.${randomBytes(4).toString("hex")}`;
  private state: "open" | "finished" | "aborted" = "open";
  private planned = false;

  constructor(dir: string, options: ShardedWriterOptions = {}) {
    this.dir = resolve(dir);
    this.options = options;
    mkdirSync(this.dir, { recursive: true });
  }

  private tempShard(i: number): string {
    return join(this.dir, `.shard-${i}.${this.tag}.safetensors`);
  }

  private open(plan?: readonly TensorSpec[]): SafetensorsWriter {
    if (!this.current) {
      this.current = new SafetensorsWriter(this.tempShard(this.finished.length), {
        metadata: this.options.shardMetadata,
        headerReserve: this.options.headerReserve,
        fsync: this.options.fsync !== "finish" && this.options.fsync !== false,
        plan,
        queue: plan ? this.options.queue : undefined,
      });
      this.planned = !!plan;
    }
    return this.current;
  }

  /** nextShard() after the current shard's queued writes (addChunksAsync `queued`) are done. */
  async nextShardAsync(): Promise<void> {
    if (this.state !== "open") fail(`the writer is ${this.state}`, this.dir);
    if (!this.current) return;
    try {
      await this.current.flush();
    } catch (err) {
      this.abort();
      throw err;
    }
    this.nextShard();
  }

  /** startShard() after the current shard's queued writes are done. */
  async startShardAsync(plan: readonly TensorSpec[]): Promise<void> {
    await this.nextShardAsync();
    this.startShard(plan);
  }

  /** finish() after the last shard's queued writes are done. */
  async finishAsync(): Promise<string[]> {
    await this.nextShardAsync();
    return this.finish();
  }

  /** Ends the current shard; the next add() starts a new one. */
  nextShard(): void {
    if (this.state !== "open") fail(`the writer is ${this.state}`, this.dir);
    if (!this.current) return;
    this.finished.push(this.current.finish());
    this.current = null;
    this.planned = false;
  }

  /**
   * Ends the current shard (if any) and starts one whose tensors are `plan`, in order: its header
   * is written first, so the shard's data is never copied (see SafetensorsWriter's `plan`).
   * maxShardBytes does not split a planned shard.
   */
  startShard(plan: readonly TensorSpec[]): void {
    if (this.state !== "open") fail(`the writer is ${this.state}`, this.dir);
    this.nextShard();
    this.open(plan);
  }

  private admit(name: string, size: number): SafetensorsWriter {
    if (this.state !== "open") fail(`the writer is ${this.state}`, this.dir, name);
    if (this.names.has(name)) fail("a tensor of this name was already added", this.dir, name);
    const max = this.options.maxShardBytes;
    if (max !== undefined && !this.planned && this.current && this.current.count > 0 && this.current.dataBytes + size > max) this.nextShard();
    return this.open();
  }

  private commit(name: string, size: number): void {
    this.names.add(name);
    this.weightMap.push([name, this.finished.length]);
    this.totalBytes += size;
  }

  add(name: string, dtype: Dtype, shape: readonly number[], data: ArrayBufferView): void {
    const size = bytesOf(data).byteLength;
    this.admit(name, size).add(name, dtype, shape, data);
    this.commit(name, size);
  }

  /** addChunks with writes in flight (see SafetensorsWriter.addChunksAsync); a failure aborts the whole checkpoint. */
  async addChunksAsync(name: string, dtype: Dtype, shape: readonly number[], chunks: Iterable<ArrayBufferView> | AsyncIterable<ArrayBufferView>, options: AsyncAddOptions = {}): Promise<void> {
    const size = specBytes(name, dtype, shape, this.dir);
    const w = this.admit(name, size);
    try {
      await w.addChunksAsync(name, dtype, shape, chunks, options);
    } catch (err) {
      this.abort();
      throw err;
    }
    this.commit(name, size);
  }

  /** add() with the bytes in pieces (see SafetensorsWriter.addChunks); a failure aborts the whole checkpoint. */
  addChunks(name: string, dtype: Dtype, shape: readonly number[], chunks: Iterable<ArrayBufferView>): void {
    const size = specBytes(name, dtype, shape, this.dir);
    const w = this.admit(name, size);
    try {
      w.addChunks(name, dtype, shape, chunks);
    } catch (err) {
      this.abort();
      throw err;
    }
    this.commit(name, size);
  }

  /** Finishes the last shard, renames all shards and writes the index. Returns the shard paths. */
  finish(): string[] {
    if (this.state !== "open") fail(`the writer is ${this.state}`, this.dir);
    try {
      if (this.current) this.nextShard();
      const count = this.finished.length;
      const nameOf = this.options.shardName ?? defaultShardName;
      const finalNames = this.finished.map((_, i) => nameOf(i, count));
      if (new Set(finalNames).size !== count) fail("shardName gives two shards the same name", this.dir);
      const paths = finalNames.map((n) => join(this.dir, n));
      if (this.options.fsync === "finish") {
        for (const tmp of this.finished) {
          const fd = openSync(tmp, "r+");
          try {
            fsyncSync(fd);
          } finally {
            closeSync(fd);
          }
        }
      }
      this.finished.forEach((tmp, i) => renameSync(tmp, paths[i]));
      const index = {
        metadata: { ...(this.options.indexMetadata ?? {}), total_size: this.totalBytes },
        weight_map: Object.fromEntries(this.weightMap.map(([n, s]) => [n, finalNames[s]])),
      };
      const indexTemp = join(this.dir, `.index.${this.tag}.json`);
      const fd = openSync(indexTemp, "wx");
      const text = Buffer.from(JSON.stringify(index, null, 2) + "\n");
      writeSync(fd, text, 0, text.length, 0);
      if (this.options.fsync !== false) fsyncSync(fd);
      closeSync(fd);
      renameSync(indexTemp, join(this.dir, "model.safetensors.index.json"));
      this.state = "finished";
      return paths;
    } catch (err) {
      this.abort();
      throw err;
    }
  }

  /** Removes the temp shards (finished shards already renamed stay). */
  abort(): void {
    if (this.state !== "open") return;
    this.state = "aborted";
    this.current?.abort();
    for (const f of this.finished) rmSync(f, { force: true });
  }
}

export { DTYPES };
