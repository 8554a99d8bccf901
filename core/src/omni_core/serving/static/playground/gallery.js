// The gallery: every result of this page with its exact request as curl and Python snippets.
import { $, h } from "./dom.js";
import * as snippets from "./snippets.js";

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = h("textarea", { readonly: true });
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "Copied";
  window.setTimeout(() => (button.textContent = "Copy"), 1500);
}

function snippet(label, testid, text) {
  const button = h("button", { type: "button", "data-testid": `copy-${testid.replace("snippet-", "")}` }, "Copy");
  button.addEventListener("click", () => copy(text, button));
  const pre = h("pre", { class: "snippet", "data-testid": testid });
  pre.textContent = text;
  return h("div", {}, h("div", { class: "snippet-head" }, h("span", {}, label), button), pre);
}

const short = (text) => (text.length > 160 ? `${text.slice(0, 160)}…` : text);

/** `entry`: { title, model, thumb (an element or null), request (see snippets.js) }. */
export function addToGallery(entry) {
  const origin = window.location.origin;
  const item = h(
    "li",
    { "data-testid": "gallery-item", "data-kind": entry.request.kind },
    h("div", { class: "what", title: entry.title }, h("strong", {}, entry.model), " · ", short(entry.title)),
    entry.thumb,
    h(
      "details",
      {},
      h("summary", {}, "Request"),
      snippet("curl", "snippet-curl", snippets.curl(origin, entry.request)),
      snippet("Python (openai)", "snippet-python", snippets.python(origin, entry.request)),
    ),
  );
  $("gallery").prepend(item);
  return item;
}
