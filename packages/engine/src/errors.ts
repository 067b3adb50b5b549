/**
 * Typed errors with the exit code the CLI maps them to (anchor.md §4):
 * 0 ok, 1 runtime failure or a memory plan that does not fit, 2 usage/config error,
 * 4 the run finished but at least one routed expert was dropped.
 */

export const EXIT_OK = 0;
export const EXIT_RUNTIME = 1;
export const EXIT_USAGE = 2;
export const EXIT_DROPPED_EXPERT = 4;

/** Base class: every engine error carries the exit code the CLI should use. */
export class K3Error extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode: number) {
    super(message);
    this.name = new.target.name;
    this.exitCode = exitCode;
  }
}

/** Bad command line or request (exit 2). */
export class UsageError extends K3Error {
  constructor(message: string) {
    super(message, EXIT_USAGE);
  }
}

/** config.json is missing keys or inconsistent; `problems` lists every one of them (exit 2). */
export class ConfigError extends K3Error {
  readonly problems: string[];
  readonly file: string;
  constructor(file: string, problems: string[]) {
    super(`${file}: ${problems.length} problem(s), refusing to guess:\n  - ${problems.join("\n  - ")}`, EXIT_USAGE);
    this.problems = problems;
    this.file = file;
  }
}

/** The memory plan does not fit the machine (exit 1); the message shows both numbers. */
export class PlanError extends K3Error {
  readonly neededBytes: number;
  readonly availableBytes: number;
  constructor(message: string, neededBytes: number, availableBytes: number) {
    super(message, EXIT_RUNTIME);
    this.neededBytes = neededBytes;
    this.availableBytes = availableBytes;
  }
}

/** The context (KV cache) would not fit: a refusal, like a config error (exit 2). */
export class ContextError extends K3Error {
  constructor(message: string) {
    super(message, EXIT_USAGE);
  }
}

/** A state file that does not belong to this model/config, or is corrupt (exit 2). */
export class StateFileError extends K3Error {
  constructor(file: string, message: string) {
    super(`${file}: ${message}`, EXIT_USAGE);
  }
}

/** A NaN or an infinity appeared in the hidden state or the logits (exit 1): the message names the first layer, and the tensor when known. */
export class NonFiniteError extends K3Error {
  constructor(message: string) {
    super(message, EXIT_RUNTIME);
  }
}

/** Generation was cancelled through its AbortSignal. */
export class AbortError extends K3Error {
  constructor(message = "generation aborted") {
    super(message, EXIT_RUNTIME);
  }
}

/** Gives the exit code for any thrown value (unknown errors are runtime failures). */
export function exitCodeOf(err: unknown): number {
  return err instanceof K3Error ? err.exitCode : EXIT_RUNTIME;
}
