// MathJax 3, set up before it loads (mkdocs.yml lists this file first).
// Markdown pages: pymdownx.arithmatex (generic mode) wraps each formula written $...$ or
// $$...$$ in an element of class "arithmatex", delimited \( \) or \[ \]. Notebook pages
// (mkdocs-jupyter) keep the notebooks' own $...$ and $$...$$ in their rendered Markdown
// and LaTeX cells ("jp-RenderedMarkdown", "jp-RenderedLatex"); headings carry them into
// the table of contents ("md-ellipsis"). MathJax skips every other element that has a
// class (and code, pre, script), so a dollar sign in prose or code stays a dollar sign.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    // ".+", not Material's ".*|": the empty alternative also matches a classless element,
    // so the paragraphs inside a notebook's Markdown cell would be skipped.
    ignoreHtmlClass: ".+",
    processHtmlClass: "arithmatex|jp-RenderedMarkdown|jp-RenderedLatex|md-ellipsis"
  }
};

// Material's instant loading swaps pages without a reload: typeset each new page.
if (typeof document$ !== "undefined") {
  document$.subscribe(() => {
    if (window.MathJax && MathJax.typesetPromise) {
      MathJax.startup.output.clearCache();
      MathJax.typesetClear();
      MathJax.texReset();
      MathJax.typesetPromise();
    }
  });
}
