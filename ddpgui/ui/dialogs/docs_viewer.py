"""Help ▸ Documentation: the guides in docs/, shown in the app.

The guides are Markdown files in the ``docs/`` folder beside the ``ddpgui`` package (a source checkout or an
editable install, as ``make run`` makes).  :class:`DocsViewer` renders them itself: Markdown with its pictures
scaled to the window, links between guides followed inside it, Back/Forward/Contents.  A desktop hands a local
``.md`` to a text editor (raw Markdown), and some have no application at all (``QDesktopServices.openUrl``
then only prints a line on stderr), so the app shows them; "Open with the desktop" hands the page shown over for
those who want it, and says so when nothing takes it.  A wheel carries no ``docs/``: then a box says where they
are.
"""
from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices, QImage, QTextCursor, QTextDocument
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QMessageBox, QPushButton, QTextBrowser, QVBoxLayout

import ddpgui

#: The page the viewer starts on and the desktop is asked to open.
INDEX = "index.md"
#: Schemes handed to the desktop (a browser, a mail client) rather than shown in the viewer.
EXTERNAL_SCHEMES = ("http", "https", "mailto")

Opener = Callable[[QUrl], bool]


def docs_folder() -> Path | None:
    """The ``docs/`` folder beside the package (source checkout or editable install), if it holds the index."""
    folder = Path(ddpgui.__file__).resolve().parent.parent / "docs"
    return folder if (folder / INDEX).is_file() else None


def online_docs() -> str | None:
    """A web address the installed distribution names (``Project-URL``, ``Home-page``), if any."""
    try:
        meta = metadata.metadata("ddpgui")
    except metadata.PackageNotFoundError:
        return None
    urls = [u.split(",", 1)[-1].strip() for u in meta.get_all("Project-URL") or []] + [meta.get("Home-page") or ""]
    return next((u for u in urls if u.startswith("http")), None)


def missing_text(online: str | None) -> str:
    """What the Help menu says when this installation has no docs/ folder."""
    where = Path(ddpgui.__file__).resolve().parent.parent / "docs"
    text = (f"The guides are not in this installation: the folder {where} is missing (an installed wheel does "
            "not carry them). They are the docs/ folder of the ddpgui source, starting at docs/index.md.")
    return text + (f"<br><br>Online: <a href='{online}'>{online}</a>" if online else "")


def open_guides(window, opener: Opener | None = None) -> QDialog | QMessageBox | None:
    """Open the guides for Help ▸ Documentation: the in-app viewer, or a box where the installation has none.

    ``opener`` (``QDesktopServices.openUrl`` unless given) is what the viewer hands pages and web links to; it
    returns False where no application is registered.  Returns the viewer or box shown, None when the desktop
    took the online address of an installation without docs/."""
    opener = opener or QDesktopServices.openUrl
    folder = docs_folder()
    if folder is None:
        online = online_docs()
        if online and opener(QUrl(online)):
            return None
        box = QMessageBox(QMessageBox.Icon.Information, "Documentation", missing_text(online),
                          QMessageBox.StandardButton.Close, window)
        box.setObjectName("docs_missing_box")
        box.open()
        return box
    viewer = window.findChild(DocsViewer, "docs_viewer")
    if viewer is None:
        viewer = DocsViewer(folder, opener, parent=window)
    viewer.show()
    viewer.raise_()
    viewer.activateWindow()
    return viewer


class DocsViewer(QDialog):
    """The guides rendered in the app: a QTextBrowser on docs/*.md with Back, Forward and Contents."""

    def __init__(self, folder: Path, opener: Opener | None = None, parent=None):
        super().__init__(parent)
        self.setObjectName("docs_viewer")
        self.setWindowTitle("ddpgui documentation")
        self.folder = folder
        self.opener = opener or QDesktopServices.openUrl
        self.originals: dict[str, QImage] = {}
        self.browser = QTextBrowser(self)
        self.browser.setObjectName("docs_browser")
        self.browser.setOpenLinks(False)
        self.browser.document().setUndoRedoEnabled(False)
        self.browser.document().setDocumentMargin(14)
        self.browser.anchorClicked.connect(self.follow)
        self.browser.sourceChanged.connect(self._page_changed)
        self.back = QPushButton("◀ Back")
        self.forward = QPushButton("Forward ▶")
        self.home = QPushButton("Contents")
        self.external = QPushButton("Open with the desktop")
        self.external.setObjectName("docs_external")
        self.external.setToolTip("Hand the page shown to the desktop's application for Markdown files")
        self.external.clicked.connect(lambda: self._hand_over(self.browser.source(), str(self.page())))
        self.back.clicked.connect(self.browser.backward)
        self.forward.clicked.connect(self.browser.forward)
        self.home.clicked.connect(lambda: self.browser.setSource(self.index_url()))
        self.browser.backwardAvailable.connect(self.back.setEnabled)
        self.browser.forwardAvailable.connect(self.forward.setEnabled)
        self.note = QLabel(f"The guides are the Markdown files in {folder}.")
        self.note.setObjectName("docs_note")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: palette(placeholder-text)")
        buttons = QHBoxLayout()
        for button in (self.back, self.forward, self.home):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.external)
        layout = QVBoxLayout(self)
        layout.addLayout(buttons)
        layout.addWidget(self.browser, 1)
        layout.addWidget(self.note)
        self.fit_timer = QTimer(self, singleShot=True, interval=80)
        self.fit_timer.timeout.connect(self.fit_images)
        self.back.setEnabled(False)
        self.forward.setEnabled(False)
        room = (parent.screen() if parent is not None else self.screen()).availableGeometry()
        self.resize(min(980, int(room.width() * 0.9)), min(760, int(room.height() * 0.9)))  # a laptop's screen too
        self.browser.setSource(self.index_url())

    def index_url(self) -> QUrl:
        return QUrl.fromLocalFile(str(self.folder / INDEX))

    def page(self) -> Path:
        """The guide shown now."""
        return Path(self.browser.source().toLocalFile())

    def follow(self, url: QUrl) -> None:
        """A clicked link: another guide in the viewer, an anchor on this page, anything else to the desktop."""
        if url.scheme() in EXTERNAL_SCHEMES:
            self._hand_over(url, url.toString())
            return
        target = self.browser.source().resolved(url)
        path = Path(target.toLocalFile())
        if url.hasFragment() and path == self.page():
            self.browser.scrollToAnchor(url.fragment())
        elif not path.exists():
            self.note.setText(f"{path} is missing from this installation.")
        elif path.suffix.lower() in (".md", ".markdown"):
            self.browser.setSource(target)
        else:
            self._hand_over(target, str(path))

    def _hand_over(self, url: QUrl, shown: str) -> None:
        if not self.opener(url):
            self.note.setText(f"No application is registered to open {shown}: open it yourself.")

    def _page_changed(self, url: QUrl) -> None:
        self.setWindowTitle(f"ddpgui documentation: {Path(url.toLocalFile()).name}")
        self.fit_images()

    def resizeEvent(self, event):  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self.fit_timer.start()

    def _original(self, name: str) -> QImage:
        """A picture of the page as its file holds it (read once; the document keeps the scaled copy)."""
        path = self.browser.source().resolved(QUrl(name)).toLocalFile()
        if path not in self.originals:
            self.originals[path] = QImage(path)
        return self.originals[path]

    def fit_images(self) -> None:
        """Scale every picture on the page to the viewer's width (never above its own size), smoothly."""
        document = self.browser.document()
        room = self.browser.viewport().width() - 2 * int(document.documentMargin()) - 8
        images = [(f.position(), f.length(), f.charFormat().toImageFormat()) for f in self.fragments()
                  if f.charFormat().isImageFormat()]
        cursor = QTextCursor(document)
        ratio = self.devicePixelRatioF()
        for position, length, image in images:
            original = self._original(image.name())
            if original.isNull() or room <= 0:
                continue
            width = min(original.width(), room)
            height = original.height() * width / original.width()
            if (image.width(), image.height()) == (width, height):
                continue
            shown = original
            if width < original.width():
                shown = original.scaledToWidth(round(width * ratio), Qt.TransformationMode.SmoothTransformation)
                shown.setDevicePixelRatio(ratio)
            # resource() looks a name up resolved against the page; addResource() takes it as given
            url = document.baseUrl().resolved(QUrl(image.name()))
            document.addResource(QTextDocument.ResourceType.ImageResource.value, url, shown)
            image.setWidth(width)
            image.setHeight(height)
            cursor.setPosition(position)
            cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
            cursor.setCharFormat(image)

    def fragments(self):
        block = self.browser.document().begin()
        while block.isValid():
            fragments = block.begin()
            while not fragments.atEnd():
                yield fragments.fragment()
                fragments += 1
            block = block.next()

    def showEvent(self, event):  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self.fit_timer.start()

