#!/usr/bin/env node
// Builds a k3 package's native addon without touching the network.
//   k3-native prebuild <nativeDir> <name>   -> <nativeDir>/prebuilds/<platform>-<arch>/<name>.node
//   k3-native rebuild  <nativeDir>          -> <nativeDir>/build/Release (source mode)
// node-gyp downloads Node headers unless told where they are; pnpm 12 and turbo's strict env both
// drop npm's nodedir setting, so we set npm_config_nodedir here from the running Node itself.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";

const [command, dirArg, name] = process.argv.slice(2);
if (!command || !dirArg || (command === "prebuild" && !name) || !["prebuild", "rebuild"].includes(command)) {
  console.error("usage: k3-native prebuild <nativeDir> <name> | k3-native rebuild <nativeDir>");
  process.exit(2);
}
const nativeDir = resolve(dirArg);
const env = { ...process.env };
const nodePrefix = dirname(dirname(process.execPath));
for (const dir of [nodePrefix, "/usr", "/usr/local"]) {
  if (existsSync(join(dir, "include", "node", "node_api.h"))) {
    env.npm_config_nodedir = dir;
    break;
  }
}
if (process.env.K3_CFLAGS) env.CFLAGS = `${process.env.CFLAGS ?? ""} ${process.env.K3_CFLAGS}`;

// Resolve the tools from the project that runs us (a package's devDependencies), then from the
// package being built and from us. A plain `npm install` of a k3 package has neither prebuildify
// nor node-gyp, but npm itself bundles node-gyp: npm exec/npx names it in npm_config_node_gyp, and
// it sits beside the npm CLI that came with this Node.
function binOf(pkg, bin) {
  for (const base of [join(process.cwd(), "package.json"), join(nativeDir, "..", "package.json"), import.meta.filename]) {
    const require = createRequire(base);
    let pkgJson;
    try {
      pkgJson = require.resolve(`${pkg}/package.json`);
    } catch {
      continue;
    }
    const meta = require(pkgJson);
    const rel = typeof meta.bin === "string" ? meta.bin : meta.bin[bin];
    return join(dirname(pkgJson), rel);
  }
  return null;
}
function npmBundledNodeGyp() {
  const candidates = [
    process.env.npm_config_node_gyp,
    process.env.npm_execpath && join(dirname(process.env.npm_execpath), "..", "node_modules", "node-gyp", "bin", "node-gyp.js"),
    join(nodePrefix, "lib", "node_modules", "npm", "node_modules", "node-gyp", "bin", "node-gyp.js"),
    "/usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js",
    "/usr/local/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js",
  ];
  return candidates.find((file) => file && existsSync(file)) ?? null;
}
const tool = command === "prebuild" ? binOf("prebuildify", "prebuildify") : (binOf("node-gyp", "node-gyp") ?? npmBundledNodeGyp());
if (!tool) {
  const missing = command === "prebuild" ? "prebuildify" : "node-gyp";
  console.error(`k3-native: cannot find ${missing} (looked in ${process.cwd()}, ${nativeDir}/.., and beside npm); install it: npm i -D ${missing}`);
  process.exit(2);
}
const args =
  command === "prebuild"
    ? [tool, "--napi", "--strip", "--cwd", nativeDir, "--name", name]
    : [tool, "rebuild", "--directory", nativeDir];
// prebuildify keeps node-gyp's devdir in $TMPDIR/prebuildify: parallel builds of several
// packages (turbo) clash there, so each build gets a private one.
const privateTmp = mkdtempSync(join(tmpdir(), "k3-native-"));
env.TMPDIR = privateTmp;
const result = spawnSync(process.execPath, args, { stdio: "inherit", env });
rmSync(privateTmp, { recursive: true, force: true });
process.exit(result.status ?? 1);
