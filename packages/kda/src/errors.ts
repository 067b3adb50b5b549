import { PackageError } from "@k3/native";

/** Every error @k3/kda throws on bad input: `code` says which kind, the message names the thing. */
export class KdaError extends PackageError {
  declare readonly code: "config" | "weight" | "input" | "state";
  constructor(code: "config" | "weight" | "input" | "state", message: string, options?: { cause?: unknown }) {
    super("@k3/kda", code, `@k3/kda: ${message}`, options);
    this.name = "KdaError";
  }
}
