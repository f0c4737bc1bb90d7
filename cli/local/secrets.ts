import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { parse } from "yaml";
import type { SecretStore } from "../../shared/runtime/deps.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";

/**
 * The local secret store: `<labfleet home>/secrets.yaml`, a flat map of UPPER_SNAKE keys to strings, that
 * only its owner may read (0600). Values never leave this module except to be written to a host.
 */
export function fileSecretStore(labfleetHome: string): SecretStore & { file: string } {
  const file = join(labfleetHome, "secrets.yaml");
  return {
    file,
    async get(keys) {
      if (keys.length === 0) return { values: {}, missing: [] };
      let text: string;
      try {
        const st = await stat(file);
        if ((st.mode & 0o077) !== 0) {
          throw new VisibleError(
            "input",
            "secrets.unsafe_mode",
            `${file} is readable by others (mode ${(st.mode & 0o777).toString(8)}): run chmod 600 ${file}`,
          );
        }
        text = await readFile(file, "utf8");
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") return { values: {}, missing: [...keys] };
        throw err;
      }
      let data: unknown;
      try {
        data = parse(text);
      } catch {
        throw new VisibleError("input", "secrets.invalid", `${file} is not valid YAML`);
      }
      const map =
        data && typeof data === "object" && !Array.isArray(data) ? (data as Record<string, unknown>) : {};
      const values: Record<string, string> = {};
      const missing: string[] = [];
      for (const k of keys) {
        const v = map[k];
        if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") values[k] = String(v);
        else missing.push(k);
      }
      return { values, missing };
    },
  };
}
