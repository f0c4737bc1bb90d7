import { timesJs } from "../time.tsx";

/**
 * The portal's one script, served from /portal.js. Everything works without it: it shows times (`<time
 * data-time>`, web/time.tsx) in the student's time zone, and adds a Copy button after each value marked
 * `data-copy` (credentials, the SSH command). Without a script times read in UTC and the values are plain
 * text to select.
 */
export const portalJs = `${timesJs}
(() => {
  const copyText = async (text) => {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    if (!ok) throw new Error("copy refused");
  };
  const status = document.getElementById("copy-status");
  for (const el of document.querySelectorAll("[data-copy]")) {
    const label = el.getAttribute("data-copy") || "value";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy " + label);
    button.addEventListener("click", async () => {
      try {
        await copyText(el.textContent || "");
        button.textContent = "Copied";
        if (status) status.textContent = "Copied " + label + ".";
      } catch {
        button.textContent = "Select and copy it";
        const range = document.createRange();
        range.selectNodeContents(el);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
      }
      setTimeout(() => { button.textContent = "Copy"; }, 2000);
    });
    el.after(button);
  }
})();
`;
