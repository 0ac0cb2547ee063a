// Draws the dataset's spatial extents (GeoJSON in data-extents). With a tile server configured
// ([serve] map_tiles, in data-tiles) its tiles are drawn under them, with its attribution;
// otherwise a longitude / latitude grid and the vendored world outline (land and country
// borders, Natural Earth 1:110m, fetched from our own static files: data-world) give the
// extent its place, with nothing fetched from elsewhere. Loaded as a file (the CSP allows no
// inline script); Leaflet and the outline are vendored in static/vendor by the build.
(function () {
  "use strict";
  var el = document.getElementById("map");
  if (!el || typeof L === "undefined") { return; }
  var extents = JSON.parse(el.getAttribute("data-extents"));
  var tiles = el.getAttribute("data-tiles");
  var map = L.map(el, { attributionControl: !!tiles, worldCopyJump: false, maxBounds: [[-90, -360], [90, 360]] });
  if (tiles) {
    L.tileLayer(tiles, { attribution: el.getAttribute("data-attribution") || "", maxZoom: 19 }).addTo(map);
  } else {
    // the outline under the grid, the grid under the extents
    map.createPane("world");
    map.getPane("world").style.zIndex = 350;
    var grid = L.layerGroup().addTo(map);
    var style = { color: "#9aa5b1", weight: 1, opacity: 0.6, interactive: false };
    var minor = { color: "#d3d8de", weight: 1, interactive: false };
    for (var lon = -180; lon <= 180; lon += 10) {
      L.polyline([[-90, lon], [90, lon]], lon % 30 === 0 ? style : minor).addTo(grid);
    }
    for (var lat = -80; lat <= 80; lat += 10) {
      L.polyline([[lat, -180], [lat, 180]], lat % 30 === 0 ? style : minor).addTo(grid);
    }
    L.polyline([[0, -180], [0, 180]], { color: "#6b7785", weight: 1.5, interactive: false }).addTo(grid);
    L.polyline([[-90, 0], [90, 0]], { color: "#6b7785", weight: 1.5, interactive: false }).addTo(grid);
    var world = el.getAttribute("data-world");
    if (world) {
      fetch(world, { credentials: "same-origin" })
        .then(function (r) { if (!r.ok) { throw new Error("world outline: HTTP " + r.status); } return r.json(); })
        .then(function (outline) {
          var drawn = L.geoJSON(outline, {
            pane: "world",
            interactive: false,
            style: function (feature) {
              return feature.properties.kind === "land"
                ? { className: "world-land", color: "#8a96a3", weight: 0.8, fillColor: "#e8ecdf", fillOpacity: 1 }
                : { className: "world-border", color: "#a7b0ba", weight: 0.6, dashArray: "2 2", fill: false };
            }
          }).addTo(map);
          el.setAttribute("data-world-drawn", String(drawn.getLayers().length));
        })
        .catch(function (err) { el.setAttribute("data-world-drawn", "0"); console.warn(String(err)); });
    }
  }
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
