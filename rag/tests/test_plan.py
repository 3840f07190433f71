"""Question planning (E4, E7): classes, Chinese aliases, typo correction, members, out-of-catalog names."""

from __future__ import annotations

import pytest

from rag.engine.catalog import Catalog
from rag.engine.plan import Planner, is_terse, looks_like_api, typo_budget


@pytest.fixture(scope="module")
def catalog(fixture_chunks) -> Catalog:
    return Catalog.from_chunks(fixture_chunks)


@pytest.fixture(scope="module")
def planner(catalog) -> Planner:
    return Planner(catalog)


# -- the catalog -------------------------------------------------------------------------------------


def test_the_catalog_knows_each_class_with_its_alias_and_members(catalog):
    camera = catalog.classes["PerspectiveCamera"]

    assert set(catalog.classes) == {
        "PerspectiveCamera", "OrbitControls", "WebGLRenderer", "Fog", "Texture", "Raycaster", "Color", "Clock", "Light",
    }
    assert (camera["alias"], camera["source"]) == ("透视相机", "PerspectiveCamera.md")
    assert {"fov", "near", "far", "updateProjectionMatrix"} <= set(camera["members"])
    assert catalog.classes["Raycaster"]["alias"] == "光线投射"


def test_the_catalog_survives_a_round_trip_through_a_dict(catalog):
    assert Catalog.from_dict(catalog.to_dict()) == catalog


# -- classes -----------------------------------------------------------------------------------------


def test_a_class_named_exactly_is_detected(planner):
    plan = planner.run("PerspectiveCamera 的 fov 默认是多少")

    assert (plan.kind, plan.classes, plan.hinted_classes, plan.corrections) == ("doc", ("PerspectiveCamera",), (), ())
    assert plan.corrected_question == plan.question


def test_the_question_is_normalised_to_single_spaces(planner):
    plan = planner.run("  PerspectiveCamera   的\n fov ")

    assert plan.question == "PerspectiveCamera 的 fov"


def test_a_chinese_title_hints_its_class(planner):
    plan = planner.run("透视相机怎么设置近裁剪面")

    assert (plan.kind, plan.classes, plan.hinted_classes) == ("doc", (), ("PerspectiveCamera",))


def test_a_title_without_parentheses_hints_its_class_too(planner):
    plan = planner.run("光线投射怎么拾取物体")

    assert plan.hinted_classes == ("Raycaster",)


def test_a_spaced_lowercase_class_name_is_detected(planner):
    plan = planner.run("perspective camera field of view")

    assert plan.classes == ("PerspectiveCamera",)


@pytest.mark.parametrize(
    "question, written, corrected, corrected_question",
    [
        ("PerspectivCamera 的 near 是多少", "PerspectivCamera", "PerspectiveCamera", "PerspectiveCamera 的 near 是多少"),
        ("Orbitcontrol 怎么开启阻尼", "Orbitcontrol", "OrbitControls", "OrbitControls 怎么开启阻尼"),
        ("webglrenderer setPixelRatio", "webglrenderer", "WebGLRenderer", "WebGLRenderer setPixelRatio"),
    ],
)
def test_a_near_miss_class_name_is_corrected_and_the_question_rewritten(
    planner, question, written, corrected, corrected_question
):
    plan = planner.run(question)

    assert plan.classes == (corrected,)
    assert (written, corrected) in plan.corrections
    assert plan.corrected_question == corrected_question
    assert plan.as_dict()["corrections"][0] == {"from": written, "to": corrected}


@pytest.mark.parametrize(
    "question, corrected_question",
    [("PerspectivCamera的near是多少", "PerspectiveCamera的near是多少"),
     ("怎么用Orbitcontrol开启阻尼", "怎么用OrbitControls开启阻尼")],
)
def test_a_corrected_name_written_against_chinese_text_is_rewritten(planner, question, corrected_question):
    plan = planner.run(question)

    assert plan.corrected_question == corrected_question


def test_an_ordinary_lowercase_word_is_not_taken_for_a_class(planner):
    plan = planner.run("what is the color of the fog")

    assert (plan.kind, plan.classes, plan.hinted_classes, plan.unknown_identifiers) == ("doc", (), (), ())


def test_the_same_word_capitalised_is_the_class(planner):
    plan = planner.run("Color.setHex 的参数")

    assert (plan.classes, plan.members) == (("Color",), ("setHex",))


# -- members -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question, member",
    [
        ("怎么修改 .fov", "fov"),
        ("什么时候要调用 updateProjectionMatrix()", "updateProjectionMatrix"),
        ("PerspectiveCamera 的 fov 默认是多少", "fov"),
        ("how does setPixelRatio work", "setPixelRatio"),
    ],
)
def test_a_member_is_detected(planner, question, member):
    plan = planner.run(question)

    assert plan.members == (member,)


@pytest.mark.parametrize("question, members", [("near", ("near",)), ("What is fov?", ("fov",)),
                                               ("fog near far", ("near", "far"))])
def test_a_terse_english_question_reads_a_word_naming_a_member_as_that_member(planner, question, members):
    plan = planner.run(question)

    assert (plan.kind, plan.members) == ("doc", members)


def test_in_english_prose_a_lowercase_word_naming_a_member_stays_a_word(planner):
    plan = planner.run("How far from the camera does the near plane of the view sit?")

    assert (plan.kind, plan.classes, plan.members) == ("doc", (), ())


def test_terse_means_at_most_three_words_besides_stopwords():
    assert is_terse("What does reindex print?") and is_terse("fog near far")
    assert not is_terse("Objects disappear when the camera zooms in")


def test_several_members_are_detected_in_order(planner):
    plan = planner.run("Texture 的 wrapS 和 flipY")

    assert (plan.classes, plan.members) == (("Texture",), ("wrapS", "flipY"))


@pytest.mark.parametrize(
    "question",
    ["PerspectiveCamera 的 updateProjectonMatrix 什么时候调用", "PerspectiveCamera.updateProjectonMatrix() 什么时候调用"],
)
def test_a_member_typo_is_corrected_within_the_detected_class(planner, question):
    plan = planner.run(question)

    assert (plan.classes, plan.members) == (("PerspectiveCamera",), ("updateProjectionMatrix",))
    assert ("updateProjectonMatrix", "updateProjectionMatrix") in plan.corrections
    assert "updateProjectionMatrix" in plan.corrected_question
    assert plan.kind == "doc"


@pytest.mark.parametrize("question", ["怎么创建 PerspectiveCamera", "how do I create a PerspectiveCamera"])
def test_a_constructor_question_asks_for_the_constructor_member(planner, question):
    plan = planner.run(question)

    assert (plan.classes, plan.members) == (("PerspectiveCamera",), ("PerspectiveCamera",))


# -- out of catalog ----------------------------------------------------------------------------------


def test_an_unknown_api_name_alone_is_out_of_catalog(planner):
    plan = planner.run("ArcRotateCamera 怎么用")

    assert (plan.kind, plan.classes, plan.unknown_identifiers) == ("out_of_catalog", (), ("ArcRotateCamera",))
    assert "ArcRotateCamera" in plan.reason


@pytest.mark.parametrize("question", [
    "django.db.utils.OperationalError: no such table: rag_knowledgebase",
    "Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\nKeyError: 'SceneGraphNode'\nwhat now?",
    "我这样写报错了 Uncaught TypeError: WidgetFactory is not a constructor\n    at init (main.js:12:5)",
    "控制台报错 TypeError: WidgetFactory不是构造函数，怎么办",  # Han right after the name (Python's \\w matches it)
])
def test_a_class_like_name_in_a_pasted_error_is_the_errors_not_an_unknown_api(planner, question):
    plan = planner.run(question)

    assert (plan.kind, plan.unknown_identifiers, plan.pasted_error) == ("doc", (), True)


def test_an_unknown_api_asked_about_beside_a_pasted_error_is_still_out_of_catalog(planner):
    plan = planner.run("How do I use ArcRotateCamera? I get TypeError: x is undefined")

    assert (plan.kind, plan.unknown_identifiers) == ("out_of_catalog", ("ArcRotateCamera",))


def test_an_unknown_api_name_next_to_a_catalog_class_stays_a_doc_question(planner):
    plan = planner.run("PerspectiveCamera 和 ArcRotateCamera 有什么区别")

    assert (plan.kind, plan.classes, plan.unknown_identifiers) == ("doc", ("PerspectiveCamera",), ("ArcRotateCamera",))


@pytest.mark.parametrize("question", ["ArcRotateCamera 怎么和 PerspectiveCamera 一起用？",
                                      "How do I use an ArcRotateCamera together with a PerspectiveCamera?"])
def test_a_question_that_writes_an_unknown_api_before_any_catalog_class_is_about_it(planner, question):
    # The API written first is what the question asks about; the docs lack it, whatever else it names.
    plan = planner.run(question)

    assert (plan.kind, plan.unknown_identifiers) == ("out_of_catalog", ("ArcRotateCamera",))


def test_a_capitalised_word_written_before_a_catalog_class_is_the_framework_around_the_question(planner):
    plan = planner.run("Angular 项目里怎么用 PerspectiveCamera？")

    assert (plan.kind, plan.classes, plan.unknown_identifiers) == ("doc", ("PerspectiveCamera",), ("Angular",))


@pytest.mark.parametrize(
    "question",
    ["Explain how the fog near distance works", "Please show how to enable damping", "Tell me about the fog"],
)
def test_a_capitalised_ordinary_word_opening_an_english_question_is_not_an_unknown_api(planner, question):
    plan = planner.run(question)

    assert (plan.kind, plan.unknown_identifiers, plan.pasted_error) == ("doc", (), False)


def test_a_question_without_identifiers_is_a_doc_question(planner):
    plan = planner.run("今天中午吃什么好")

    assert (plan.kind, plan.classes, plan.members, plan.unknown_identifiers) == ("doc", (), (), ())


# -- the editable alias table ------------------------------------------------------------------------


def test_an_editable_chinese_alias_hints_its_class(catalog, planner):
    with_alias = Planner(catalog, aliases={"相机": "PerspectiveCamera"})

    plan = with_alias.run("相机怎么调视野")

    assert planner.run("相机怎么调视野").hinted_classes == ()
    assert plan.hinted_classes == ("PerspectiveCamera",)


def test_an_editable_latin_alias_names_its_class(catalog):
    plan = Planner(catalog, aliases={"cam": "PerspectiveCamera"}).run("cam 的视野角度")

    assert plan.classes == ("PerspectiveCamera",)


def test_an_alias_to_a_class_outside_the_catalog_is_ignored(catalog):
    plan = Planner(catalog, aliases={"材质": "Material"}).run("材质怎么设置")

    assert (plan.classes, plan.hinted_classes) == ((), ())


# -- helpers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("length, budget", [(4, 1), (6, 1), (7, 2), (12, 2), (13, 3), (30, 3)])
def test_the_typo_budget_grows_with_the_name(length, budget):
    assert typo_budget(length) == budget


@pytest.mark.parametrize(
    "token, expected",
    [("ArcRotateCamera", True), ("Rigidbody", True), ("setPixelRatio", True), ("color", False), ("HTML", False),
     ("Fog", False)],
)
def test_in_chinese_text_api_like_names_are_camel_case_or_capitalised(token, expected):
    assert looks_like_api(token) is expected


@pytest.mark.parametrize("token, expected", [("ArcRotateCamera", True), ("setPixelRatio", True), ("Rigidbody", False),
                                             ("Explain", False)])
def test_in_english_text_only_inner_capitals_make_an_api_name(token, expected):
    assert looks_like_api(token, in_chinese=False) is expected


def test_a_plan_serialises_to_plain_lists(planner):
    data = planner.run("PerspectivCamera 的 fov").as_dict()

    assert data == {
        "question": "PerspectivCamera 的 fov",
        "corrected_question": "PerspectiveCamera 的 fov",
        "kind": "doc",
        "classes": ["PerspectiveCamera"],
        "hinted_classes": [],
        "members": ["fov"],
        "corrections": [{"from": "PerspectivCamera", "to": "PerspectiveCamera"}],
        "unknown_identifiers": [],
        "inherited": [],
        "reason": "",
        "pasted_error": False,
        "everyday_words": [],
    }


# -- small talk --------------------------------------------------------------------------------------


@pytest.mark.parametrize("message", [
    "你好", "你好，你是谁？", "谢谢你，辛苦啦", "好的，谢谢！", "你真笨", "你用的是什么模型？", "嗨，在吗",
    "你好吗？", "嗨，最近过得怎么样", "您今天忙不忙呀", "吃了没",
    "hello", "Hi there, who are you?", "Thanks a lot!", "thank you for your help", "which model are you running on?",
    "What LLM do you use?", "you are useless", "good morning",
])
def test_greetings_thanks_insults_and_questions_about_the_assistant_are_chitchat(planner, message):
    plan = planner.run(message)

    assert (plan.kind, plan.classes, plan.members) == ("chitchat", (), ())


@pytest.mark.parametrize("message", [
    "你好，请问 Fog 的颜色怎么设置？", "你好请问，模型加载完怎么改透明度", "谢谢！那相机的视野角度默认多少？",
    "hello, how do I rotate a camera?", "Thanks, but how do I set the fog color?", "What model formats can I load?",
    "hello world example", "你好，最近怎么设置雾的颜色？", "相机最近的裁剪面默认是多少", "材质怎么样才能透明",
])
def test_a_greeting_in_front_of_a_question_leaves_it_a_question(planner, message):
    assert planner.run(message).kind != "chitchat"


# -- inheritance -------------------------------------------------------------------------------------


def _inheritance_catalog(tmp_path) -> Catalog:
    from rag.engine.chunk import chunk_documents
    from rag.engine.ingest import read_folder

    pages = {
        "Object3D.md": "# Object3D\n\nThe base of every scene object.\n\n### .castShadow : Boolean\n\nWhether it casts shadows.\n"
                       "\n### .visible : Boolean\n\nWhether it is rendered.\n",
        "Light.md": "# Light\n\n> Category: Lights · Inheritance: Object3D\n\nThe base of the lights.\n\n"
                    "### .intensity : Float\n\nThe light's strength.\n",
        "SpotLight.md": "# SpotLight\n\n> Category: Lights · Inheritance: Object3D → Light\n\nA cone of light.\n\n"
                        "### .angle : Float\n\nThe cone's opening.\n\n### .castShadow : Boolean\n\nSpot lights may cast shadows.\n",
        "Mesh.md": "# 网格（Mesh）\n\n> 分类：物体 · 继承自 Object3D\n\n三角形组成的物体。\n\n### .material : Material\n\n它的材质。\n",
    }
    for name, text in pages.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return Catalog.from_chunks(chunk_documents(read_folder(tmp_path)))


def test_the_catalog_reads_each_pages_inheritance_line_nearest_ancestor_first(tmp_path):
    catalog = _inheritance_catalog(tmp_path)

    assert catalog.ancestors("SpotLight") == ["Light", "Object3D"]
    assert catalog.ancestors("Mesh") == ["Object3D"]
    assert catalog.ancestors("Object3D") == []
    assert catalog.owner_of("intensity", "SpotLight") == "Light"
    assert catalog.owner_of("castShadow", "SpotLight") == "SpotLight"  # its own page documents it again
    assert catalog.owner_of("visible", "Mesh") == "Object3D"
    assert catalog.owner_of("angle", "Mesh") is None


def test_an_inherited_member_brings_the_page_that_documents_it(tmp_path):
    planner = Planner(_inheritance_catalog(tmp_path))

    plan = planner.run("SpotLight.intensity has no effect")
    own = planner.run("SpotLight.angle is too wide")
    page = planner.run("网格 Mesh 的 visible 属性怎么用")

    assert (plan.classes, plan.members, plan.inherited) == (("SpotLight", "Light"), ("intensity",),
                                                           (("intensity", "Light"),))
    assert (own.classes, own.inherited) == (("SpotLight",), ())
    assert (page.classes, page.inherited) == (("Mesh", "Object3D"), (("visible", "Object3D"),))


def test_a_catalog_saved_before_the_class_graph_opens_with_no_ancestors(catalog):
    data = catalog.to_dict()
    for entry in data["classes"].values():
        entry.pop("ancestors")

    assert Catalog.from_dict(data).ancestors("PerspectiveCamera") == []


# -- pasted code and error text ----------------------------------------------------------------------


@pytest.mark.parametrize("question", [
    "is it possible to rotate the text? i tried myText.rotation.z = Math.PI / 2 but nothing happens",
    "this.$ref.model.rotation 加载模型以后一直是 0",
    "const gltfLoaderInstance = new Something(); the camera fov looks wrong",
])
def test_a_variable_in_pasted_code_is_never_an_unknown_class(planner, question):
    plan = planner.run(question)

    assert plan.kind == "doc"
    assert not any(name[0].islower() for name in plan.unknown_identifiers)


def test_a_namespaced_class_is_the_class_not_its_constructor(planner):
    plan = planner.run("THREE.PerspectiveCamera looks stretched in WebVR")

    assert (plan.kind, plan.classes) == ("doc", ("PerspectiveCamera",))
    assert "PerspectiveCamera" not in plan.members


def test_a_class_written_in_lowercase_is_the_class(planner):
    assert planner.run("why does my perspectivecamera look stretched").classes == ("PerspectiveCamera",)


def test_a_plural_is_read_as_the_class_or_member_it_is_the_plural_of(planner):
    plan = planner.run("My updateProjectionMatrixes never apply")

    assert (plan.kind, plan.members) == ("doc", ("updateProjectionMatrix",))


def test_single_letter_members_in_code_are_not_routes(planner):
    assert not {"r", "g"} & set(planner.run("color.r 和 color.g 怎么设置").members)


def test_a_property_whose_type_is_a_documented_class_hints_that_class_and_its_ancestors(tmp_path):
    catalog = _inheritance_catalog(tmp_path)
    (tmp_path / "SpotLightShadow.md").write_text(
        "# SpotLightShadow\n\n> Inheritance: LightShadow\n\nThe spot light's shadow camera.\n\n"
        "### .focus : Float\n\nHow far the shadow camera's field of view is narrowed.\n", encoding="utf-8")
    (tmp_path / "LightShadow.md").write_text(
        "# LightShadow\n\nShadows of lights.\n\n### .mapSize : Vector2\n\nThe shadow map's resolution.\n",
        encoding="utf-8")
    (tmp_path / "SpotLight.md").write_text(
        "# SpotLight\n\n> Inheritance: Object3D → Light\n\nA cone of light.\n\n"
        "### .shadow : SpotLightShadow\n\nThe light's shadow.\n\n### .angle : Float\n\nThe cone's opening.\n",
        encoding="utf-8")
    from rag.engine.chunk import chunk_documents
    from rag.engine.ingest import read_folder

    catalog = Catalog.from_chunks(chunk_documents(read_folder(tmp_path)))
    planner = Planner(catalog)

    assert catalog.member_types("SpotLight") == {"shadow": "SpotLightShadow"}
    assert planner.run("SpotLight shadows look blocky").hinted_classes == ("SpotLightShadow", "LightShadow")
    assert planner.run("SpotLight cone is too wide").hinted_classes == ()


def test_the_parts_before_a_class_in_a_dotted_name_are_its_namespace_not_classes_asked_about(tmp_path):
    (tmp_path / "toolkit.md").write_text(
        "# toolkit\n\nThe module's functions.\n\n### echo ( message )\n\nPrints a message.\n", encoding="utf-8")
    (tmp_path / "IntSpan.md").write_text(
        "# IntSpan\n\nRestricts an integer to a span.\n\n### clamp : bool\n\nClamp instead of failing.\n",
        encoding="utf-8")
    from rag.engine.chunk import chunk_documents
    from rag.engine.ingest import read_folder

    planner = Planner(Catalog.from_chunks(chunk_documents(read_folder(tmp_path))))
    plan = planner.run("With toolkit.IntSpan, what happens to a value out of the span?")

    assert (plan.classes, plan.hinted_classes) == (("IntSpan",), ("toolkit",))
    assert planner.run("What does toolkit.echo print?").classes == ("toolkit",)  # the class of a member named on it


# -- everyday words ----------------------------------------------------------------------------------


def test_everyday_words_plan_a_question_with_the_docs_terms(catalog):
    planner = Planner(catalog, words={"发糊": "setPixelRatio", "Blurry": "setPixelRatio"})

    chinese = planner.run("手机上画面发糊怎么办？")
    english = planner.run("the picture is  blurry on phones")

    assert chinese.expansions == (("发糊", "setPixelRatio"),) and chinese.members == ("setPixelRatio",)
    assert chinese.question == "手机上画面发糊怎么办？" and chinese.corrected_question.endswith(" setPixelRatio")
    assert english.expansions == (("blurry", "setPixelRatio"),) and english.members == ("setPixelRatio",)
    assert chinese.as_dict()["everyday_words"] == [{"phrase": "发糊", "terms": "setPixelRatio"}]


def test_a_latin_phrase_matches_whole_words_only_and_no_table_changes_nothing(catalog):
    planner = Planner(catalog, words={"blur": "setPixelRatio"})

    assert planner.run("the picture is blurry on phones").expansions == ()
    assert planner.run("手机上画面发糊怎么办？") == Planner(catalog).run("手机上画面发糊怎么办？")


def test_a_term_the_catalog_lacks_is_never_an_unknown_api(catalog):
    plan = Planner(catalog, words={"发糊": "DevicePixelRatio setPixelRatio"}).run("画面发糊")

    assert plan.kind == "doc" and plan.unknown_identifiers == ()
