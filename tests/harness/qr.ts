import jsQRModule from "jsqr";

// jsqr is CommonJS: its module.exports is the function, and also carries it as `default`.
const jsQR = jsQRModule.default;

/** Decodes a QR code from RGBA pixels (what a canvas's getImageData gives), or undefined when none is found. */
export function decodeQr(rgba: ArrayLike<number>, width: number, height: number): string | undefined {
  return jsQR(Uint8ClampedArray.from(rgba), width, height, { inversionAttempts: "attemptBoth" })?.data;
}

/**
 * Decodes a QR code drawn in a terminal with half blocks, two modules per character: `█` both light, `▀` the
 * upper light, `▄` the lower light, a space both dark (as `labfleet portal slide` prints it). Lines that hold
 * anything else are not part of the code. Each module becomes a 4x4 square of pixels for the decoder.
 */
export function decodeTerminalQr(text: string): string | undefined {
  const lines = text.split("\n").filter((l) => l.length > 0 && /^[█▀▄ ]+$/.test(l) && /[█▀▄]/.test(l));
  if (lines.length === 0) return undefined;
  const cols = Math.max(...lines.map((l) => [...l].length));
  const rows: boolean[][] = []; // true: light
  for (const line of lines) {
    const chars = [...line.padEnd(cols, " ")];
    rows.push(chars.map((c) => c === "█" || c === "▀"));
    rows.push(chars.map((c) => c === "█" || c === "▄"));
  }
  const scale = 4;
  const width = cols * scale;
  const height = rows.length * scale;
  const px = new Uint8ClampedArray(width * height * 4);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) {
      const v = rows[Math.floor(y / scale)]?.[Math.floor(x / scale)] ? 255 : 0;
      px.set([v, v, v, 255], (y * width + x) * 4);
    }
  return decodeQr(px, width, height);
}
