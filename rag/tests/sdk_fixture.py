"""A small SDK written here in three versions (1.4, 2.0, 2.1), in English and Chinese pages, whose API changes
between them in every way a diff must find; `CHANGES` is the ground truth."""

from __future__ import annotations

from pathlib import Path

VERSIONS = ("1.4", "2.0", "2.1")

# member -> (signature heading, description, versions that document it)
VIEWER = {
    "render": ("### .render ( scene : Scene ) : undefined",
               "Draws the scene once into the output canvas of the viewer.", VERSIONS),
    "setSize": ("### .setSize ( width : Number, height : Number ) : undefined",
                "Resizes the output canvas to the given width and height in pixels.", ("1.4", "2.0")),
    "loop": ("### .loop ( callback : Function ) : undefined",
             "Calls the callback on every animation frame until it is given null.", ("1.4",)),
    "setAnimationLoop": ("### .setAnimationLoop ( callback : Function ) : undefined",
                         "Calls the callback on every animation frame until it is given null.", ("2.0", "2.1")),
    "dispose": ("### .dispose () : undefined", "Frees the GPU resources that this viewer holds.", ("1.4", "2.0")),
    "captureFrame": ("### .captureFrame () : String",
                     "Returns the current frame as a PNG data URL for screenshots.", ("2.1",)),
}
SET_SIZE_21 = ("### .setSize ( width : Number, height : Number, updateStyle : Boolean ) : undefined",
               "Resizes the output canvas to the given width and height in pixels.")

RIG = {
    "autoRotate": ("### .autoRotate : Boolean", "是否让相机自动绕目标旋转，默认值为 false。", VERSIONS),
    "zoomSpeed": ("### .zoomSpeed : Number", "鼠标滚轮缩放相机的速度，默认值为 1。", ("2.0", "2.1")),
    "update": ("### .update () : Boolean", "在每一帧调用，按用户的输入更新相机的位置。", VERSIONS),
    "reset": ("### .reset () : undefined", "把相机恢复到控制器创建时的位置和朝向。", ("1.4", "2.0")),
    "restore": ("### .restore () : undefined", "把相机恢复到控制器创建时的位置和朝向。", ("2.1",)),
}

# What the diff must find, per pair of neighbouring versions.
CHANGES = {
    ("1.4", "2.0"): {"added": {"CameraRig.zoomSpeed"}, "removed": set(), "classes_removed": {"ImageLoader"},
                     "classes_added": set(), "renamed": {("Viewer.loop", "Viewer.setAnimationLoop")},
                     "signature_changed": set()},
    ("2.0", "2.1"): {"added": {"Viewer.captureFrame"}, "removed": {"Viewer.dispose"}, "classes_removed": set(),
                     "classes_added": {"Timer"}, "renamed": {("CameraRig.reset", "CameraRig.restore")},
                     "signature_changed": {"Viewer.setSize"}},
}


def _page(title: str, intro: str, sections: list[tuple[str, str, dict]], version: str) -> str:
    lines = [f"# {title}", "", intro, ""]
    for heading, members in sections:
        lines += [heading, ""]
        for member, (signature, description, versions) in members.items():
            if version not in versions:
                continue
            if member == "setSize" and version == "2.1":
                signature, description = SET_SIZE_21
            lines += [signature, "", description, ""]
    return "\n".join(lines)


def write_version(folder: Path, version: str) -> Path:
    """Write version `version` of the SDK's pages into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    viewer = {**VIEWER}
    if version == "2.1":
        viewer["setSize"] = (*viewer["setSize"][:2], VERSIONS)
    (folder / "Viewer.md").write_text(_page(
        "Viewer", "> Category: Core\n\nThe Viewer draws a scene into a canvas element of the page.",
        [("## Methods", viewer)], version), encoding="utf-8")
    (folder / "CameraRig.md").write_text(_page(
        "相机控制器（CameraRig）", "> 分类：控制器\n\n相机控制器让用户用鼠标旋转、平移和缩放相机。",
        [("## 属性", {k: v for k, v in RIG.items() if k in ("autoRotate", "zoomSpeed")}),
         ("## 方法", {k: v for k, v in RIG.items() if k not in ("autoRotate", "zoomSpeed")})], version),
        encoding="utf-8")
    if version == "1.4":
        (folder / "ImageLoader.md").write_text(
            "# ImageLoader\n\nLoads an image from a URL for textures.\n\n## Methods\n\n"
            "### .load ( url : String ) : Image\n\nStarts loading the image at the URL and returns it.\n",
            encoding="utf-8")
    if version == "2.1":
        (folder / "Timer.md").write_text(
            "# Timer\n\nMeasures the time between animation frames.\n\n## Methods\n\n"
            "### .getDelta () : Number\n\nReturns the seconds passed since the previous call.\n", encoding="utf-8")
    return folder


def write_versions(root: Path) -> dict[str, Path]:
    return {version: write_version(root / version, version) for version in VERSIONS}


def build_sdk(root: Path, slug: str = "fx") -> dict:
    """Build the three versions as the knowledge base `slug` (needs the database); return version -> its row."""
    from rag.services.knowledge import index_build
    from rag.services.sdk import sdk_version_ensure

    rows = {}
    for version, folder in write_versions(root).items():
        row = sdk_version_ensure(sdk=slug, version=version, source=str(folder))
        index_build(row)
        row.refresh_from_db()
        rows[version] = row
    return rows
