// Publishing checks over every public @k3/* package, run by `pnpm test` after the package suites:
// the manifest a consumer relies on, the README's opening usage example, a changeset-ready name,
// and for native packages a prebuilt binary with a portable glibc symbol ceiling. Then, over the
// whole repo: every `docs/<file>.md` a source file cites exists, and so does the section (`§2.3`) it names.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { checklist } from "./checklist.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
// Built on Debian 12: pthread symbols carry GLIBC_2.34 since they moved into libc. So prebuilds
// run on glibc >= 2.34 (Debian 12, Ubuntu 22.04, RHEL 9); older systems build from source.
const GLIBC_CEILING = [2, 34];
const { check, finish } = checklist("package checks");

function glibcVersions(file) {
  let out = "";
  try {
    out = execFileSync("objdump", ["-T", file], { encoding: "utf8" });
  } catch {
    return null; // binutils missing: reported by the caller
  }
  return [...out.matchAll(/GLIBC_(\d+)\.(\d+)/g)].map((m) => [Number(m[1]), Number(m[2])]);
}

for (const dir of readdirSync(join(root, "packages")).sort()) {
  const base = join(root, "packages", dir);
  if (!existsSync(join(base, "package.json"))) continue;
  const pkg = JSON.parse(readFileSync(join(base, "package.json"), "utf8"));
  if (pkg.private) continue;
  const name = pkg.name;
  check(name, "is scoped @k3/", name.startsWith("@k3/"));
  check(name, "type module", pkg.type === "module");
  check(name, "engines.node >=20", /^>=\s*20/.test(pkg.engines?.node ?? ""));
  check(name, "publishConfig.access public", pkg.publishConfig?.access === "public");
  const dot = pkg.exports?.["."];
  check(name, "exports['.'] has types, import and default", !!(dot?.types && dot?.import && dot?.default));
  check(name, "has no install script", !pkg.scripts?.install && !pkg.scripts?.postinstall && !pkg.scripts?.preinstall);
  check(name, "no binding.gyp at the package root", !existsSync(join(base, "binding.gyp")));
  const readme = existsSync(join(base, "README.md")) ? readFileSync(join(base, "README.md"), "utf8") : "";
  const firstFence = readme.indexOf("```");
  check(name, "README.md opens with a usage example", firstFence >= 0 && firstFence < 1500, "no code block near the top");
  check(name, "README says ESM only in its first lines", /ESM only/.test(readme.slice(0, 600)));
  for (const dep of Object.keys(pkg.dependencies ?? {}))
    if (dep.startsWith("@k3/")) check(name, `depends on ${dep} as workspace:^`, pkg.dependencies[dep] === "workspace:^");

  if (existsSync(join(base, "native", "binding.gyp"))) {
    check(name, "native: node-gyp-build is a runtime dependency", !!pkg.dependencies?.["node-gyp-build"]);
    check(name, "native: node-addon-api is a runtime dependency", !!pkg.dependencies?.["node-addon-api"]);
    check(name, "native: ships native/ in files", (pkg.files ?? []).includes("native"));
    check(name, "native: ships no native/test", (pkg.files ?? []).includes("!native/test"));
    // Prebuilds exist for linux-x64 only and the kernels are x86-64 code: npm must refuse elsewhere.
    check(name, "native: declares os linux and cpu x64", String(pkg.os) === "linux" && String(pkg.cpu) === "x64");
    const prebuildDir = join(base, "native", "prebuilds", `${process.platform}-${process.arch}`);
    const binaries = existsSync(prebuildDir) ? readdirSync(prebuildDir).filter((f) => f.endsWith(".node")) : [];
    check(name, `native: a prebuild in native/prebuilds/${process.platform}-${process.arch}`, binaries.length > 0);
    for (const bin of binaries) {
      const versions = glibcVersions(join(prebuildDir, bin));
      if (versions === null) {
        check(name, "native: objdump available to read glibc symbol versions", false, "install binutils");
        continue;
      }
      const max = versions.reduce((a, b) => (b[0] > a[0] || (b[0] === a[0] && b[1] > a[1]) ? b : a), [0, 0]);
      const ok = max[0] < GLIBC_CEILING[0] || (max[0] === GLIBC_CEILING[0] && max[1] <= GLIBC_CEILING[1]);
      check(name, `native: ${bin} needs glibc <= ${GLIBC_CEILING.join(".")}`, ok, `needs GLIBC_${max.join(".")}`);
    }
  }
}
// Citations: code comments point at docs/ in the repo, never at notes outside it.
const sources = execFileSync("git", ["ls-files", "packages", "scripts", "examples", "reference", "vitest.config.ts"], { cwd: root, encoding: "utf8" })
  .split("\n")
  .filter((f) => /\.(ts|mts|mjs|js|c|h|cc|py|gyp|gypi|sh)$/.test(f) && !f.includes("/dist/"));
let citations = 0;
for (const file of sources) {
  if (!existsSync(join(root, file))) continue;
  const text = readFileSync(join(root, file), "utf8");
  for (const m of text.matchAll(/docs\/([\w./-]+\.md)(?:\s+§(\d+(?:\.\d+)?))?/g)) {
    citations++;
    const doc = join(root, "docs", m[1]);
    const ok = existsSync(doc);
    check("docs", `${file} cites docs/${m[1]}${m[2] ? ` §${m[2]}` : ""}`, ok && (!m[2] || readFileSync(doc, "utf8").includes(`§${m[2]}`)), ok ? `no §${m[2]} in docs/${m[1]}` : "no such file");
  }
}
check("docs", "source files cite docs/", citations > 0, "no citation found: the scan is broken");
finish();
