// Loaded between require.js and the widget manager (embed-amd.js) on pages with ipywidgets;
// tools/fetch_assets.py copies it beside them. Each AMD module that embed-amd.js defines finds
// its font files (Font Awesome, used by the controls' icons) in the folder of its own module URL,
// which require.js would otherwise place under the page's folder, where nothing is (HTTP 404).
// Point every one of those module names at the manager's real folder.
(function () {
  var here = document.currentScript.src.replace(/[^/]*$/, "") + "html-manager/";
  var paths = { "@jupyter-widgets/html-manager/dist": here.slice(0, -1) };
  ["base", "base7", "controls", "controls7", "html-manager"].forEach(function (name) {
    paths["@jupyter-widgets/" + name] = here + name;   // module URL here + name + ".js": folder `here`
  });
  require.config({ paths: paths });
})();
