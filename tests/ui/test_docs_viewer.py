"""Help ▸ Documentation (issue 24): the guides in the app's own viewer, handed to the desktop on request.

Under the offscreen platform the desktop has no browser: ``QDesktopServices.openUrl`` returns False (and only
prints a line on stderr), as on a desktop with no browser or ``xdg-open`` registered.  The viewer shows
docs/index.md and follows its links to the other guides, inside the app; handing a page over says when nothing
took it.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction, QGuiApplication, QTextCursor, QTextDocument
from PySide6.QtWidgets import QMessageBox

from ddpgui.ui.dialogs.docs_viewer import DocsViewer, docs_folder, open_guides

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _docs_action(window) -> QAction:
    return next(a for a in window.menuBar().findChildren(QAction) if a.objectName() == "menu_docs")


def _click_link(qtbot, viewer: DocsViewer, href: str) -> None:
    """Click the link to ``href`` in the viewer as a user would: on its text, in the viewport."""
    browser = viewer.browser
    fragment = next((f for f in viewer.fragments() if f.charFormat().anchorHref() == href), None)
    assert fragment is not None, f"no link to {href} on {viewer.page()}"
    cursor = QTextCursor(browser.document())
    cursor.setPosition(fragment.position() + fragment.length() // 2)
    browser.setTextCursor(cursor)
    browser.ensureCursorVisible()
    qtbot.mouseClick(browser.viewport(), Qt.MouseButton.LeftButton, pos=browser.cursorRect(cursor).center())


def test_no_browser_shows_the_guides_in_the_app_and_follows_their_links(window, qtbot):
    assert QGuiApplication.platformName() == "offscreen"  # a desktop with no browser registered
    _docs_action(window).trigger()
    viewer = window.findChild(DocsViewer, "docs_viewer")
    assert viewer is not None
    qtbot.waitUntil(viewer.isVisible)
    assert viewer.page() == DOCS / "index.md"
    text = viewer.browser.toPlainText()
    assert "Guides, one per task" in text and "Slurm clusters" in text
    assert str(DOCS) in viewer.note.text()
    assert not viewer.back.isEnabled()

    _click_link(qtbot, viewer, "guide-slurm.md")
    qtbot.waitUntil(lambda: viewer.page() == DOCS / "guide-slurm.md")
    assert "A run as a Slurm job" in viewer.browser.toPlainText()
    assert "Guides, one per task" not in viewer.browser.toPlainText()
    viewer.fit_images()
    room = viewer.browser.viewport().width()
    shown = [f.charFormat().toImageFormat() for f in viewer.fragments() if f.charFormat().isImageFormat()]
    assert [f.name() for f in shown] == ["slurm.png"]
    assert 0 < shown[0].width() <= room < 1400  # the 1400-px picture scaled down to the viewer, not cut off
    picture = viewer.browser.document().resource(QTextDocument.ResourceType.ImageResource.value, QUrl("slurm.png"))
    assert not picture.isNull()  # found beside the guide, and scaled smoothly to the width it is shown at
    assert round(picture.width() / picture.devicePixelRatio()) == round(shown[0].width())

    assert viewer.back.isEnabled()
    qtbot.mouseClick(viewer.back, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: viewer.page() == DOCS / "index.md")
    _docs_action(window).trigger()  # the same window again, not a second one
    assert window.findChildren(DocsViewer) == [viewer]
    viewer.close()


def test_links_the_viewer_cannot_show_go_to_the_desktop_or_say_why(window, qtbot):
    asked = []
    viewer = open_guides(window, opener=lambda url: asked.append(url) or False)
    assert isinstance(viewer, DocsViewer) and asked == []  # the app shows the guides: nothing asked of the desktop
    viewer.follow(QUrl("no-such-guide.md"))
    assert f"{DOCS / 'no-such-guide.md'} is missing" in viewer.note.text()
    assert viewer.page() == DOCS / "index.md"
    viewer.follow(QUrl("figures/loss.pdf"))  # not Markdown: the desktop's, and no application for it here
    assert asked[-1].toLocalFile() == str(DOCS / "figures" / "loss.pdf")
    assert "No application is registered to open" in viewer.note.text() and "loss.pdf" in viewer.note.text()
    viewer.follow(QUrl("https://pytorch.org/docs/stable/ddp.html"))
    assert asked[-1].toString() == "https://pytorch.org/docs/stable/ddp.html"
    viewer.follow(QUrl("guide-cli.md"))
    assert viewer.page() == DOCS / "guide-cli.md" and "Exit codes" in viewer.browser.toPlainText()
    viewer.close()


def test_open_with_the_desktop_hands_over_the_page_shown_or_says_nothing_took_it(window, qtbot):
    asked = []
    viewer = open_guides(window, opener=lambda url: asked.append(url) or True)
    viewer.follow(QUrl("guide-cli.md"))
    qtbot.mouseClick(viewer.external, Qt.MouseButton.LeftButton)
    assert asked == [QUrl.fromLocalFile(str(DOCS / "guide-cli.md"))]
    assert "No application" not in viewer.note.text()
    viewer.opener = lambda url: False  # a desktop with nothing registered for Markdown
    qtbot.mouseClick(viewer.external, Qt.MouseButton.LeftButton)
    assert "No application is registered to open" in viewer.note.text() and "guide-cli.md" in viewer.note.text()
    viewer.close()


def test_an_installation_without_docs_says_where_they_are(window, qtbot, monkeypatch, tmp_path):
    import ddpgui

    assert docs_folder() == DOCS
    wheel = tmp_path / "site-packages" / "ddpgui"
    wheel.mkdir(parents=True)
    monkeypatch.setattr(ddpgui, "__file__", str(wheel / "__init__.py"))  # a wheel: no docs/ beside the package
    assert docs_folder() is None
    box = open_guides(window, opener=lambda url: False)
    assert isinstance(box, QMessageBox) and box.objectName() == "docs_missing_box"
    qtbot.waitUntil(box.isVisible)
    assert str(tmp_path / "site-packages" / "docs") in box.text() and "docs/index.md" in box.text()
    assert window.findChild(DocsViewer) is None
    box.close()
