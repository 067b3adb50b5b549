#!/usr/bin/env node
// The k3-safetensors CLI (see src/cli.ts).
import { main } from "../dist/cli.js";
process.exitCode = await main(process.argv.slice(2));
