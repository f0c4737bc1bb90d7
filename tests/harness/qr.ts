import jsQRModule from "jsqr";
import type { Browser, Page } from "playwright-core";

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

/**
 * What a camera would read: the SVG of the page's `.slide-qr` drawn on a canvas in a page of its own (no CSP there), its pixels
 * decoded. Returns the text of the QR code, or undefined when none is found.
 */
export async function readQr(browser: Browser, p: Page): Promise<string | undefined> {
  const svg = await p.locator(".slide-qr svg").evaluate((el) => el.outerHTML);
  const blank = await browser.newPage();
  try {
    // Dark or light per pixel, as one string: an array of every channel would take seconds to pass over.
    const size = 320;
    const dark = await blank.evaluate<string>(
      `new Promise((resolve, reject) => {
        const img = new Image();
        img.onload = () => {
          const canvas = document.createElement("canvas");
          canvas.width = ${size}; canvas.height = ${size};
          const ctx = canvas.getContext("2d");
          ctx.drawImage(img, 0, 0, ${size}, ${size});
          const d = ctx.getImageData(0, 0, ${size}, ${size}).data;
          let out = "";
          for (let i = 0; i < d.length; i += 4) out += d[i] + d[i + 1] + d[i + 2] < 384 ? "1" : "0";
          resolve(out);
        };
        img.onerror = () => reject(new Error("the SVG did not load as an image"));
        img.src = "data:image/svg+xml;base64," + ${JSON.stringify(Buffer.from(svg).toString("base64"))};
      })`,
    );
    const pixels = new Uint8ClampedArray(size * size * 4);
    for (let i = 0; i < dark.length; i++) {
      const v = dark[i] === "1" ? 0 : 255;
      pixels.set([v, v, v, 255], i * 4);
    }
    return decodeQr(pixels, size, size);
  } finally {
    await blank.close();
  }
}
