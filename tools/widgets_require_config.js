// Loaded between require.js and the widget manager (embed-amd.js) on pages with ipywidgets;
// tools/fetch_assets.py copies it beside them. The widget manager finds its font files
// relative to its AMD module's URL, which require.js would otherwise place under the page's
// own folder (where nothing is): point that module name at the manager's real folder.
(function () {
  var here = document.currentScript.src.replace(/[^/]*$/, "");
  require.config({ paths: { "@jupyter-widgets/html-manager/dist": here + "html-manager" } });
})();
