// Keyboard navigation: j / k go to the next / previous pair of the current list (links the page already holds).
document.addEventListener("keydown", (event) => {
  const target = event.target;
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) return;
  let link = null;
  if (event.key === "j") link = document.getElementById("next") || document.querySelector("a.pair-link");
  else if (event.key === "k") link = document.getElementById("prev");
  if (link) {
    event.preventDefault();
    window.location.href = link.href;
  }
});
