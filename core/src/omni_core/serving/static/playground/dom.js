// Building the page: elements and text nodes only. Nothing here (or anywhere in the
// playground) assigns HTML: the page's Content-Security-Policy turns on Trusted Types with no
// policy, so the browser itself refuses innerHTML and friends.

/** `h("li", {class: "x", "data-testid": "y"}, "text", child)`: strings become text nodes. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) throw new Error("no inline handlers");
    el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return el;
}

export const $ = (id) => document.getElementById(id);

export function showError(error) {
  const box = $("error");
  box.textContent = error && error.message ? error.message : String(error);
  box.hidden = false;
}

export function clearError() {
  const box = $("error");
  box.textContent = "";
  box.hidden = true;
}

export function option(value, label, selected = false) {
  const el = h("option", { value }, label);
  el.selected = selected;
  return el;
}

export const sleep = (ms) => new Promise((resolve) => window.setTimeout(resolve, ms));
