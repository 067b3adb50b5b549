/** When a prefill's progress is shown: no addon here, so the CLI's help stays free of them. */
import type { PrefillProgress } from "./engine.js";

/**
 * Passes a prefill's progress on from `afterSeconds` in, at most every `everySeconds`, and its end
 * once anything was passed (a prefill over sooner passes nothing): what the CLI's bar and the
 * server's SSE comments show. It goes by the events' own times, so it is testable.
 */
export function throttledProgress(every: { afterSeconds: number; everySeconds: number }, emit: (p: PrefillProgress) => void): (p: PrefillProgress) => void {
  let last = -Infinity;
  let passed = false;
  return (p) => {
    const done = p.fraction >= 1;
    if (done ? !passed : p.seconds < every.afterSeconds || p.seconds - last < every.everySeconds) return;
    last = p.seconds;
    passed = true;
    emit(p);
  };
}
