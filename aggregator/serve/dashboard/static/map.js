// Draws the dataset's spatial extents (GeoJSON in data-extents) over a plain longitude /
// latitude grid: no tile server, nothing fetched. Loaded as a file (the CSP allows no inline
// script); Leaflet is vendored in static/vendor/leaflet by the build.
(function () {
  "use strict";
  var el = document.getElementById("map");
  if (!el || typeof L === "undefined") { return; }
  var extents = JSON.parse(el.getAttribute("data-extents"));
  var map = L.map(el, { attributionControl: false, worldCopyJump: false, maxBounds: [[-90, -360], [90, 360]] });
  var grid = L.layerGroup().addTo(map);
  var style = { color: "#9aa5b1", weight: 1, opacity: 0.6, interactive: false };
  for (var lon = -180; lon <= 180; lon += 10) {
    L.polyline([[-90, lon], [90, lon]], lon % 30 === 0 ? style : { color: "#d3d8de", weight: 1, interactive: false }).addTo(grid);
  }
  for (var lat = -80; lat <= 80; lat += 10) {
    L.polyline([[lat, -180], [lat, 180]], lat % 30 === 0 ? style : { color: "#d3d8de", weight: 1, interactive: false }).addTo(grid);
  }
  L.polyline([[0, -180], [0, 180]], { color: "#6b7785", weight: 1.5, interactive: false }).addTo(grid);
  L.polyline([[-90, 0], [90, 0]], { color: "#6b7785", weight: 1.5, interactive: false }).addTo(grid);
  var layer = L.geoJSON(extents, {
    style: { color: "#b3261e", weight: 2, fillOpacity: 0.25 },
    pointToLayer: function (feature, latlng) { return L.circleMarker(latlng, { radius: 6 }); }
  }).addTo(map);
  var bounds = layer.getBounds();
  if (bounds.isValid()) {
    map.fitBounds(bounds.pad(0.6), { maxZoom: 8 });
  } else {
    map.setView([20, 0], 1);
  }
  el.setAttribute("data-drawn", String(layer.getLayers().length));
})();
