(function () {
  var script = document.currentScript;  // null in a shadow tree: then find the widget by its id
  var root = (script && script.closest(".gpt-widget")) || document.getElementById("WIDGET_ID");
  var data = JSON.parse(root.querySelector("script[type='application/json']").textContent);
  var controls = root.querySelectorAll("[data-widget-control]");
  var outputs = root.querySelectorAll("[data-widget-output]");
  function draw() {
    var flat = 0;
    controls.forEach(function (control, j) {
      var position = Number(control.value);
      flat = flat * data.labels[j].length + position;
      var shown = root.querySelector("[data-widget-value='" + j + "']");
      if (shown) { shown.textContent = data.labels[j][position]; }
    });
    var view = data.views[data.index[flat]];
    outputs.forEach(function (output, k) { output.innerHTML = view[k]; });
  }
  controls.forEach(function (control) {
    control.addEventListener("input", draw);
    control.addEventListener("change", draw);
  });
})();
