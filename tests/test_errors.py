"""The error root's helpers."""

from benanza.errors import BenanzaError, ModelError, RegistryError, one_line


def test_one_line_takes_the_first_non_empty_line() -> None:
    assert one_line(ValueError("\n  first problem  \nsecond")) == "first problem"


def test_one_line_of_an_empty_message_is_the_type_name() -> None:
    assert one_line(RuntimeError("")) == "RuntimeError"
    assert one_line(RuntimeError("   \n ")) == "RuntimeError"


def test_messages_name_the_file_and_list_known_names() -> None:
    assert str(ModelError("m.onnx", "no such file")) == "m.onnx: no such file"
    err = RegistryError("runtime", "tpu", ["null", "onnxruntime"])
    assert isinstance(err, BenanzaError) and str(err) == "unknown runtime 'tpu'; known: null, onnxruntime"
