/**
 * The one base class of every error a k3 package throws. Each package keeps its own class (and
 * its tests keep checking it with `instanceof`), all of them extend this one, so a caller can handle
 * any k3 failure in one place and read the same three fields on each:
 *
 * - `package`: the package that refused or failed (`"@k3/safetensors"`, ...);
 * - `code`: a stable tag of the kind of failure, narrowed by each package to its own union of
 *   values (safetensors' `"HeaderTooLarge"`, kda's `"weight"`, an errno like `"ENOSPC"`, ...);
 * - `cause` (ES2022): the error this one wraps, kept whole with its stack, instead of pasting only
 *   its message into a new one.
 *
 * The message is the caller's, unchanged: the base adds no prefix of its own.
 */
export class PackageError extends Error {
  readonly package: string;
  readonly code: string;

  constructor(packageName: string, code: string, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.package = packageName;
    this.code = code;
  }
}
