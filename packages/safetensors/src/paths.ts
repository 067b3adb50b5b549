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

/**
 * Resolves a shard name against the checkpoint directory: refuses unsafe names, missing files
 * and symlinks that leave the directory. Returns the path to open.
 */
export function resolveShard(dir: string, realDir: string, name: string, indexFile: string): string {
  const reason = unsafeShardReason(name);
  if (reason) throw new SafetensorsError("UnsafeShardPath", `shard path ${JSON.stringify(name)} is refused: ${reason}`, { file: indexFile });
  const path = join(dir, name);
  if (!existsSync(path)) throw new SafetensorsError("MissingShard", `shard ${JSON.stringify(name)} listed in weight_map does not exist`, { file: indexFile });
  const real = realpathSync(path);
  const rel = relative(realDir, real);
  if (rel === "" || rel.startsWith(`..${sep}`) || rel === ".." || isAbsolute(rel)) {
    throw new SafetensorsError("UnsafeShardPath", `shard ${JSON.stringify(name)} resolves outside the checkpoint directory (${real})`, { file: indexFile });
  }
  if (!statSync(real).isFile()) throw new SafetensorsError("MissingShard", `shard ${JSON.stringify(name)} is not a regular file`, { file: indexFile });
  return path;
}
