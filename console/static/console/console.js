// The console's only script: draw the plotly figures a page (or an htmx fragment) embeds, and
// ask before destructive form posts. Figures arrive as <script type="application/json"> next to
// a <div data-figure="<id of that script>">; htmx.onLoad runs for the page and every swap.
(function () {
  "use strict";

  var config = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"]};

  function draw(root) {
    root.querySelectorAll("[data-figure]").forEach(function (holder) {
      var source = document.getElementById(holder.dataset.figure);
      if (!source || typeof Plotly === "undefined") return;
      var figure = JSON.parse(source.textContent);
      // the container takes the figure's height, so a tall chart never spills over the next
      if (figure.layout.height) holder.style.height = figure.layout.height + "px";
      Plotly.react(holder, figure.data, figure.layout, config);
    });
  }

  htmx.onLoad(draw);

  document.addEventListener("submit", function (event) {
    var message = event.target.dataset && event.target.dataset.confirm;
    if (message && !window.confirm(message)) event.preventDefault();
  });
})();
