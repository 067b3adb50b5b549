/**
 * Loads a k3 native addon (N-API) that lives in `<package>/native`.
 *
 * Prebuilt binaries (`native/prebuilds/<platform>-<arch>/*.node`) are shipped inside each npm
 * tarball, so installing runs no script. `PREBUILDS_ONLY=1` refuses a local `native/build`
 * (which node-gyp-build would otherwise prefer) so tests prove the shipped binary works.
 */
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { PackageError } from "./errors.js";

const require = createRequire(import.meta.url);
const nodeGypBuild = require("node-gyp-build") as ((dir: string) => unknown) & {
  resolve(dir: string): string;
};

export interface LoadedAddon<T> {
  /** The addon's exports. */
  binding: T;
  /** Absolute path of the `.node` file that was loaded. */
  file: string;
  /** `prebuilt` when it came from `native/prebuilds`, `source` for a local `native/build`. */
  origin: "prebuilt" | "source";
}

/** The addon of `package` could not be loaded (code "load"); `cause` is the loader's own error. */
export class NativeLoadError extends PackageError {
  constructor(packageName: string, nativeDir: string, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(
      packageName,
      "load",
      `${packageName}: could not load its native addon from ${nativeDir}\n` +
        `  reason: ${reason}\n` +
        `  platform: ${process.platform}-${process.arch}, node ${process.version}, N-API ${process.versions.napi}\n` +
        `  prebuilt binaries ship for linux-x64 (glibc >= 2.34); on other x86-64 Linux systems build from source with\n` +
        `  \`npx k3-native rebuild ${nativeDir}\` (needs a C compiler and Python for node-gyp).`,
      { cause },
    );
  }
}

/**
 * Loads the addon of the package whose module URL is `moduleUrl`. `src/` and `dist/` sit at the
 * same depth, so `../native` resolves from sources under vitest and from the published bundle.
 */
export function loadAddon<T>(packageName: string, moduleUrl: string): LoadedAddon<T> {
  const nativeDir = join(dirname(fileURLToPath(moduleUrl)), "..", "native");
  if (!existsSync(nativeDir)) throw new NativeLoadError(packageName, nativeDir, "no native/ folder");
  try {
    const file = nodeGypBuild.resolve(nativeDir);
    const binding = require(file) as T;
    const origin = file.includes(`${join("native", "prebuilds")}`) ? "prebuilt" : "source";
    return { binding, file, origin };
  } catch (err) {
    throw new NativeLoadError(packageName, nativeDir, err);
  }
}

export { PackageError } from "./errors.js";
export { readRegularFileSync, readRegularTextSync, FileRefusedError } from "./regular-file.js";
export { formatBytes } from "./format.js";
export { ProgressMeter, progressPrinter, redrawLine, type Progress, type ProgressStream } from "./progress.js";
