// A small markdown renderer for the chat page (nothing is fetched from the network): fenced code, headings, lists,
// block quotes, tables, rules, paragraphs; inline code, bold, italics, strike-through and links. The text is escaped
// first, so the model's output can never inject HTML.
(function () {
  const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

  function inline(s) {
    const code = [];
    s = s.replace(/`([^`]+)`/g, (_, c) => { code.push(c); return "\u0000" + (code.length - 1) + "\u0000"; });
    s = s.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>").replace(/__([^_]+)__/g, "<strong>$1</strong>")
         .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>").replace(/(^|\W)_([^_\s][^_]*)_(?=\W|$)/g, "$1<em>$2</em>")
         .replace(/~~([^~]+)~~/g, "<del>$1</del>")
         .replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" target="_blank" rel="noopener">$1</a>');
    return s.replace(/\u0000(\d+)\u0000/g, (_, i) => "<code>" + code[+i] + "</code>");
  }

  function cells(row) { return row.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim()); }

  function render(src) {
    const lines = esc(src).split("\n");
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if ((m = line.match(/^\s*```\s*([\w+-]*)/))) {            // fenced code, to its closing fence (or the end)
        const body = [];
        for (i++; i < lines.length && !/^\s*```/.test(lines[i]); i++) body.push(lines[i]);
        i++;
        out.push('<pre><code' + (m[1] ? ' class="language-' + m[1] + '"' : "") + ">" + body.join("\n") + "</code></pre>");
      } else if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
        out.push("<h" + m[1].length + ">" + inline(m[2]) + "</h" + m[1].length + ">"); i++;
      } else if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) { out.push("<hr>"); i++; }
      else if (/^\s*&gt;/.test(line)) {
        const body = [];
        for (; i < lines.length && /^\s*&gt;/.test(lines[i]); i++) body.push(lines[i].replace(/^\s*&gt;\s?/, ""));
        out.push("<blockquote>" + render_escaped(body.join("\n")) + "</blockquote>");
      } else if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
        const ordered = /^\s*\d/.test(line), items = [];
        for (; i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i]); i++) items.push(lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, ""));
        const tag = ordered ? "ol" : "ul";
        out.push("<" + tag + ">" + items.map((t) => "<li>" + inline(t) + "</li>").join("") + "</" + tag + ">");
      } else if (line.includes("|") && i + 1 < lines.length && /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/.test(lines[i + 1])) {
        const head = cells(line), rows = [];
        for (i += 2; i < lines.length && lines[i].includes("|"); i++) rows.push(cells(lines[i]));
        out.push("<table><thead><tr>" + head.map((c) => "<th>" + inline(c) + "</th>").join("") + "</tr></thead><tbody>" +
                 rows.map((r) => "<tr>" + r.map((c) => "<td>" + inline(c) + "</td>").join("") + "</tr>").join("") + "</tbody></table>");
      } else if (!line.trim()) { i++; }
      else {
        const para = [];
        for (; i < lines.length && lines[i].trim() && !/^\s*(```|#{1,6}\s|&gt;|([-*+]|\d+[.)])\s+)/.test(lines[i]); i++) para.push(lines[i]);
        if (!para.length) { para.push(lines[i]); i++; }
        out.push("<p>" + inline(para.join("\n")).replace(/\n/g, "<br>") + "</p>");
      }
    }
    return out.join("\n");
  }
  // a block quote's body is already escaped: render it without escaping again
  function render_escaped(s) { return render(s.replace(/&gt;/g, ">").replace(/&lt;/g, "<").replace(/&quot;/g, '"').replace(/&amp;/g, "&")); }

  window.renderMarkdown = render;
})();
