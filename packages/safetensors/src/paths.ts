/**
 * Shard path safety for index.json weight maps (the rules of @huggingface/hub, plus a realpath
 * check): a shard must be a plain relative path that stays inside the checkpoint directory.
 */
import { existsSync, realpathSync, statSync } from "node:fs";
import { isAbsolute, join, relative, sep } from "node:path";
import { SafetensorsError } from "./errors.js";

/** Why `name` is not a safe relative shard path, or null when it is. */
export function unsafeShardReason(name: string): string | null {
  if (name.length === 0) return "empty file name";
  if (/[\u0000-\u001f\u007f]/.test(name)) return "control character in the file name";
  if (name.includes("\\")) return "backslash in the file name";
  if (name.startsWith("/") || isAbsolute(name)) return "absolute path";
  if (/^[A-Za-z][A-Za-z0-9+.-]*:/.test(name)) return "URL or drive prefix";
  // Percent-decode repeatedly, as a server might, and look at the segments each time.
  let decoded = name;
  for (let round = 0; round < 8; round++) {
    for (const segment of decoded.split("/")) {
      if (segment === "..") return "'..' segment";
      if (segment === "." || segment === "") return "empty or '.' segment";
    }
    if (decoded.includes("\\")) return "backslash in the file name";
    let next: string;
    try {
      next = decodeURIComponent(decoded);
    } catch {
      break;
    }
    if (next === decoded) break;
    decoded = next;
  }
  return null;
}

/** A directory shards may live in: as given, and its real path (for the escape check). */
export interface ShardRoot {
  dir: string;
  realDir: string;
}

/** The checkpoint directory first, then any extra shard directories (`shardDirs`), each resolved once. */
export function shardRoots(dir: string, extra: readonly string[] = []): ShardRoot[] {
  return [dir, ...extra].map((d) => {
    try {
      return { dir: d, realDir: realpathSync(d) };
    } catch (err) {
      throw new SafetensorsError("MissingShard", `shard directory ${JSON.stringify(d)} cannot be opened (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, { file: d, cause: err });
    }
  });
}

/**
 * Resolves a shard name against the checkpoint directory and any extra shard directories (shards
 * spread over several drives): refuses unsafe names, a shard found in none or in two of them, and
 * symlinks that leave the directory holding them. Returns the path to open.
 */
export function resolveShard(roots: readonly ShardRoot[], name: string, indexFile: string): string {
  const reason = unsafeShardReason(name);
  if (reason) throw new SafetensorsError("UnsafeShardPath", `shard path ${JSON.stringify(name)} is refused: ${reason}`, { file: indexFile });
  const found = roots.filter((r) => existsSync(join(r.dir, name)));
  if (found.length === 0) {
    const where = roots.length > 1 ? ` (looked in ${roots.map((r) => r.dir).join(", ")})` : "";
    throw new SafetensorsError("MissingShard", `shard ${JSON.stringify(name)} listed in weight_map does not exist${where}`, { file: indexFile });
  }
  if (found.length > 1) throw new SafetensorsError("MissingShard", `shard ${JSON.stringify(name)} is in both ${found[0].dir} and ${found[1].dir}: keep one copy`, { file: indexFile });
  const { dir, realDir } = found[0];
  const path = join(dir, name);
  const real = realpathSync(path);
  const rel = relative(realDir, real);
  if (rel === "" || rel.startsWith(`..${sep}`) || rel === ".." || isAbsolute(rel)) {
    throw new SafetensorsError("UnsafeShardPath", `shard ${JSON.stringify(name)} resolves outside ${dir === roots[0].dir ? "the checkpoint directory" : dir} (${real})`, { file: indexFile });
  }
  if (!statSync(real).isFile()) throw new SafetensorsError("MissingShard", `shard ${JSON.stringify(name)} is not a regular file`, { file: indexFile });
  return path;
}
