// The TTY progress bar redraws its whole line: what a terminal shows after a long item then a
// short one is the short line alone (the bar padded to 100 columns left the long name's tail).
import { describe, expect, it } from "vitest";
import { formatBytes } from "@k3/native";
import { progressPrinter, redrawLine } from "@k3/native";
import { formatBytes as moeFormatBytes } from "../src/errors.js";

/** One terminal line: \r returns to column 0, ESC [K erases to the end, \n ends the line, other characters overwrite. */
function screen(writes: string[], columns: number): string[] {
  const done: string[] = [];
  let line: string[] = [];
  let col = 0;
  const text = writes.join("");
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "\r") col = 0;
    else if (c === "\n") (done.push(line.join("")), (line = []), (col = 0));
    else if (text.startsWith("\x1b[K", i)) (line.length = col), (i += 2);
    else {
      if (col >= columns) throw new Error(`line wrapped past ${columns} columns: a \\r redraw cannot reach its start`);
      line[col++] = c;
    }
  }
  return [...done, line.join("")];
}

const p = (item: string, done = false) => ({ phase: "download", item, bytesDone: 5e8, bytesTotal: 1e9, bytesResumed: 0, rate: 2.5e8, etaSeconds: 2, done });

describe("progress bar on a TTY", () => {
  it("a shorter item after a longer one leaves no stray characters", () => {
    const writes: string[] = [];
    const print = progressPrinter({ isTTY: true, columns: 200, write: (s: string) => writes.push(s) }, { intervalMs: 0 });
    print(p("model-00001-of-00096-with-a-much-longer-name-than-the-next-one-has-at-all.safetensors"));
    print(p("config.json"));
    const shown = screen(writes, 200);
    expect(shown).toHaveLength(1);
    expect(shown[0]).toMatch(/^download \[#{15}\.{15}\] 50\.0% 500\.00 MB\/1\.00 GB 250\.00 MB\/s ETA 2s config\.json$/);
  });

  it("never wraps: the line is cut to the terminal width", () => {
    const writes: string[] = [];
    const print = progressPrinter({ isTTY: true, columns: 100, write: (s: string) => writes.push(s) }, { intervalMs: 0 });
    print(p("x".repeat(300)));
    print(p("y".repeat(300), true));
    const shown = screen(writes, 100);
    expect(shown[0].length).toBeLessThan(100);
    expect(shown[0]).toMatch(/^download .*y+…$/);
    expect(shown[1]).toBe("");
  });

  it("redrawLine ends the line only when done", () => {
    const w: string[] = [];
    redrawLine({ write: (s: string) => w.push(s) }, "abc");
    redrawLine({ write: (s: string) => w.push(s) }, "de", true);
    expect(screen(w, 100)).toEqual(["de", ""]);
  });
});

describe("one byte formatter", () => {
  it("decimal units everywhere (moe-stream re-exports @k3/native's)", () => {
    expect(moeFormatBytes).toBe(formatBytes);
    expect([999, 1536, 17547264, 4.7e9, 1.56e12].map(formatBytes)).toEqual(["999 B", "1.5 kB", "17.55 MB", "4.70 GB", "1.56 TB"]);
  });
});
