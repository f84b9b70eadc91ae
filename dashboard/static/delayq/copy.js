// Copy buttons: <button class="copy" data-copy="ID" hidden> copies the text of #ID. Hidden until
// this runs, so a page without JavaScript shows no button that does nothing.
(function () {
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Plain http (no Clipboard API outside a secure context): the older selection route.
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    const copied = document.execCommand("copy");
    area.remove();
    return copied ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function setUp(root) {
    for (const button of root.querySelectorAll("button.copy[data-copy]")) {
      button.hidden = false;
      if (button.dataset.copyReady) continue;
      button.dataset.copyReady = "1";
      button.addEventListener("click", function () {
        const source = document.getElementById(button.dataset.copy);
        if (!source) return;
        copyText(source.textContent.trim()).then(
          function () { button.textContent = "Copied"; },
          function () { button.textContent = "Select and copy by hand"; });
        setTimeout(function () { button.textContent = "Copy"; }, 2000);
      });
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { setUp(document); });
  } else {
    setUp(document);
  }
})();
