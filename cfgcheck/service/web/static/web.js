// cfgcheck's page: progressive enhancement only. Without this script the form still posts and
// the page shows every result; with it, the fieldset of the other mode is hidden, a file can be
// uploaded into the text box, and fixes and the link copy with one click.
"use strict";
(function () {
  var MAX_UPLOAD = 1000000;
  var form = document.getElementById("check");
  if (!form) { return; }
  document.documentElement.classList.add("js");

  function showMode() {
    var chosen = form.querySelector("input[name=mode]:checked");
    var mode = chosen ? chosen.value : "paste";
    // A Hugging Face config.json is the model only: the other sections come from the preset.
    var hf = mode === "paste" && document.getElementById("format").value === "hf-config";
    document.getElementById("paste").classList.toggle("hidden-mode", mode !== "paste");
    document.getElementById("preset").classList.toggle("hidden-mode", mode !== "preset" && !hf);
  }
  form.querySelectorAll("input[name=mode]").forEach(function (r) { r.addEventListener("change", showMode); });
  document.getElementById("format").addEventListener("change", showMode);
  showMode();

  var upload = document.getElementById("upload");
  if (upload && window.FileReader) {
    upload.closest(".upload").hidden = false;
    upload.addEventListener("change", function () {
      var file = upload.files && upload.files[0];
      if (!file) { return; }
      if (file.size > MAX_UPLOAD) {
        upload.setCustomValidity("the file is over " + MAX_UPLOAD + " bytes");
        upload.reportValidity();
        return;
      }
      upload.setCustomValidity("");
      var reader = new FileReader();
      reader.onload = function () {
        document.getElementById("config").value = String(reader.result);
        document.getElementById("filename").value = file.name.replace(/[^A-Za-z0-9_.\-]/g, "_").replace(/^[.\-]+/, "");
        if (/\.(py|ipynb)$/i.test(file.name)) { document.getElementById("format").value = "python"; }
        if (file.name === "config.json") { document.getElementById("format").value = "hf-config"; }
        showMode();
      };
      reader.readAsText(file);
    });
  }

  function copy(text, button) {
    function done() {
      button.textContent = "Copied";
      button.classList.add("done");
      button.setAttribute("data-copied", text);
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, done);
    } else {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.className = "skip";
      document.body.appendChild(area);
      area.select();
      try { document.execCommand("copy"); } catch (e) { /* the text stays selectable */ }
      document.body.removeChild(area);
      done();
    }
  }
  document.querySelectorAll("button.copy").forEach(function (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      var target = button.getAttribute("data-copy");
      var link = button.getAttribute("data-copy-link");
      if (target) {
        copy(document.getElementById(target).textContent, button);
      } else if (link) {
        copy(new URL(document.getElementById(link).getAttribute("href"), window.location.href).href, button);
      }
    });
  });

  document.querySelectorAll("a.loc[data-line]").forEach(function (a) {
    a.addEventListener("click", function () {
      document.querySelectorAll(".listing li.flash").forEach(function (li) { li.classList.remove("flash"); });
      var li = document.getElementById("L" + a.getAttribute("data-line"));
      if (li) { li.classList.add("flash"); }
    });
  });

  form.addEventListener("submit", function () {
    form.setAttribute("aria-busy", "true");
    var results = document.getElementById("results");
    if (results) { results.setAttribute("aria-busy", "true"); }
  });
})();
