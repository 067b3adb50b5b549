/**
 * Special-token matching on UTF-8 bytes. tiktoken searches with an alternation of the escaped
 * special strings; we scan for the leftmost position where any special of a given set starts and
 * take the longest one there (tiktoken's choice among specials that prefix each other depends on
 * hash-map order, i.e. is undefined; none of the shipped vocabularies has such a pair).
 */
export interface SpecialToken {
  name: string;
  id: number;
  bytes: Uint8Array;
}

export class SpecialMatcher {
  /** Specials grouped by first byte, longest first. */
  private readonly byFirst: (number[] | undefined)[] = new Array(256);

  constructor(readonly tokens: SpecialToken[]) {
    tokens.forEach((t, i) => {
      const list = (this.byFirst[t.bytes[0]] ??= []);
      list.push(i);
    });
    for (const list of this.byFirst) list?.sort((a, b) => tokens[b].bytes.length - tokens[a].bytes.length);
  }

  /**
   * Leftmost match in bytes[from, end) among the specials whose mask entry is 1.
   * Returns the special's index and sets `found.pos`; -1 when there is none.
   */
  find(bytes: Uint8Array, from: number, end: number, mask: Uint8Array, found: { pos: number }): number {
    for (let p = from; p < end; p++) {
      const list = this.byFirst[bytes[p]];
      if (!list) continue;
      for (const i of list) {
        if (!mask[i]) continue;
        const b = this.tokens[i].bytes;
        if (p + b.length > end) continue;
        let k = 1;
        while (k < b.length && bytes[p + k] === b[k]) k++;
        if (k === b.length) {
          found.pos = p;
          return i;
        }
      }
    }
    return -1;
  }
}
