// The pass/fail tally the publishing checks (check-packages, check-tarballs) share.
export function checklist(title) {
  let passed = 0;
  let failed = 0;
  return {
    /** Counts one check; a failure is printed with its detail (a tool's output goes on its own lines). */
    check(pkgName, what, ok, detail = "") {
      if (ok) {
        passed++;
        return;
      }
      failed++;
      const more = !detail ? "" : detail.includes("\n") ? `\n${detail}` : ` (${detail})`;
      console.error(`FAIL ${pkgName}: ${what}${more}`);
    },
    /** Prints "<title>: N passed, M failed" and exits non-zero on any failure. */
    finish() {
      console.log(`${title}: ${passed} passed, ${failed} failed`);
      process.exit(failed ? 1 : 0);
    },
  };
}
