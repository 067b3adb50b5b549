/** The native backend, when the addon loads (filled in by native-backend.ts). */
import type { Backend } from "./backend.js";
export const nativeBackend: Backend | null = null;
export const nativeLoadError: string | null = "not built yet";
