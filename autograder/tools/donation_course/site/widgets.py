"""A widget as a static picture: what it showed when the site's build ran it.

A live widget needs a kernel and the widget manager's JavaScript (from a
CDN); a static page has neither. nbclient stores the state of every widget a
notebook made in the notebook's metadata (the Jupyter widget-state format),
so the picture is read from there: text widgets give their HTML, controls
their label and value, Output widgets their outputs (the explorer's chart is
a PNG the real measurement drew). Nothing is drawn again or made up.
"""
import html

from nbformat.v4 import new_output

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
NOTE = ("A picture of this widget as it was when the site was built, from a real run. "
        "Run the lesson (the links at the top of the page) to use it.")
IMAGES = ("image/png", "image/svg+xml", "image/jpeg")


def widget_state(nb) -> dict:
    """{model_id: state} of every widget the executed notebook kept."""
    return {model_id: model["state"] | {"_model_name": model["model_name"]}
            for model_id, model in nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {}).items()}


def is_widget_view(output) -> bool:
    return WIDGET_VIEW in output.get("data", {})


def static_outputs(output, state: dict) -> list:
    """The outputs that stand for one widget view output: HTML for text and controls, the images as
    they are. An unknown or missing widget gives its plain-text form."""
    model_id = output["data"][WIDGET_VIEW]["model_id"]
    if model_id not in state:
        return [new_output("display_data", data={"text/plain": output["data"].get("text/plain", "")})]
    pieces = []  # HTML strings and image outputs, in the widget's order
    _walk(model_id, state, pieces)
    outputs, html_run = [], []

    def flush():
        if html_run:
            body = "".join(html_run)
            outputs.append(new_output("display_data", data={
                "text/html": f'<div class="widget-static">{body}</div>', "text/plain": _plain(body)}))
            html_run.clear()

    html_run.append(f'<p class="widget-static-note">{html.escape(NOTE)}</p>')
    for piece in pieces:
        if isinstance(piece, str):
            html_run.append(piece)
        else:
            flush()
            outputs.append(piece)
    flush()
    return outputs


def _walk(model_id: str, state: dict, pieces: list) -> None:
    model = state.get(model_id)
    if model is None:
        return
    name = model["_model_name"]
    classes = " ".join(html.escape(c) for c in model.get("_dom_classes", []))
    if "children" in model:  # VBox, HBox, Box, GridBox, Accordion, Tab
        inner = []
        for child in model["children"]:
            _walk(child.removeprefix("IPY_MODEL_"), state, inner)
        if name == "HBoxModel" and all(isinstance(piece, str) for piece in inner):
            pieces.append(f'<div class="widget-static-row {classes}">{"".join(inner)}</div>')
        else:  # a column, or a row holding a picture: the pieces one below the other
            pieces.extend(inner)
    elif name in ("HTMLModel", "HTMLMathModel"):
        pieces.append(f'<div class="widget-static-html {classes}">{model.get("value", "")}</div>')
    elif name == "LabelModel":
        pieces.append(f'<div class="widget-static-html {classes}">{html.escape(str(model.get("value", "")))}</div>')
    elif name == "OutputModel":
        for out in model.get("outputs", []):
            data = out.get("data", {})
            if any(kind in data for kind in IMAGES):
                pieces.append(new_output("display_data", data={k: v for k, v in data.items()
                                                               if k in IMAGES or k == "text/plain"}))
            elif "text/html" in data:
                pieces.append(f'<div class="{classes}">{"".join(data["text/html"])}</div>')
            elif out.get("output_type") == "stream" or "text/plain" in data:
                text = out.get("text", "") or "".join(data.get("text/plain", ""))
                pieces.append(f'<pre class="{classes}">{html.escape(text)}</pre>')
    elif name == "ButtonModel":
        return  # an action; it does nothing on a static page
    elif "value" in model:  # sliders, toggles, text boxes, dropdowns: label and value
        value = model["value"]
        if name == "ToggleButtonModel":
            shown = html.escape(model.get("description", ""))
        else:
            label = html.escape(model.get("description", ""))
            shown = f"{label}: <b>{html.escape(str(value))}</b>" if label else f"<b>{html.escape(str(value))}</b>"
        pieces.append(f'<span class="widget-static-control {classes}">{shown}</span>')


def _plain(body: str) -> str:
    import re

    return html.unescape(re.sub(r"<[^>]+>", " ", body)).strip()
