import { PackageError } from "@k3/native";

/** Every error @k3/mla throws on bad input: `code` says which kind, the message names the thing. */
export class MlaError extends PackageError {
  declare readonly code: "config" | "weight" | "input" | "cache";
  constructor(code: "config" | "weight" | "input" | "cache", message: string, options?: { cause?: unknown }) {
    super("@k3/mla", code, `@k3/mla: ${message}`, options);
    this.name = "MlaError";
  }
}
