// Building DOM nodes without HTML parsing: strings always become text nodes.

/**
 * @param {string} tag
 * @param {Record<string, string>} attributes  set with setAttribute, never parsed as markup
 * @param {...(Node|string)} children
 */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  for (const child of children) {
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

/** JSON text indented for reading (as given when it is not JSON). */
export function prettyJson(text) {
  if (!text) return "{}";
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return String(text);
  }
}
