// JSON for the adapter protocol (docs/adapter-protocol.md), small enough to need no library.
//
// parse: objects -> LinkedHashMap, arrays -> ArrayList, integers -> Long, other numbers ->
// Double, {"$b64": "..."} -> byte[]. write: Map, List, String, Number, Boolean, null, byte[] (as
// {"$b64"}), Date (seconds), anything else by its toString() (the library's LongString). Strict
// enough for one line per message: a malformed line is an IllegalArgumentException.

import java.util.ArrayList;
import java.util.Base64;
import java.util.Date;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

final class Json {
    private final String text;
    private int at;

    private Json(String text) {
        this.text = text;
    }

    static Object parse(String text) {
        Json json = new Json(text);
        Object value = json.value();
        json.space();
        if (json.at != text.length()) throw new IllegalArgumentException("trailing characters at " + json.at);
        return value;
    }

    private void space() {
        while (at < text.length() && Character.isWhitespace(text.charAt(at))) at++;
    }

    private char next() {
        space();
        if (at >= text.length()) throw new IllegalArgumentException("unexpected end of JSON");
        return text.charAt(at);
    }

    private void expect(String word) {
        if (!text.startsWith(word, at)) throw new IllegalArgumentException("expected " + word + " at " + at);
        at += word.length();
    }

    private Object value() {
        char c = next();
        switch (c) {
            case '{': return object();
            case '[': return array();
            case '"': return string();
            case 't': expect("true"); return Boolean.TRUE;
            case 'f': expect("false"); return Boolean.FALSE;
            case 'n': expect("null"); return null;
            default: return number();
        }
    }

    private Object object() {
        Map<String, Object> map = new LinkedHashMap<>();
        at++;
        if (next() == '}') {
            at++;
            return map;
        }
        while (true) {
            if (next() != '"') throw new IllegalArgumentException("expected a key at " + at);
            String key = string();
            if (next() != ':') throw new IllegalArgumentException("expected : at " + at);
            at++;
            map.put(key, value());
            char c = next();
            at++;
            if (c == '}') break;
            if (c != ',') throw new IllegalArgumentException("expected , or } at " + at);
        }
        if (map.size() == 1 && map.get("$b64") instanceof String) {
            return Base64.getDecoder().decode((String) map.get("$b64"));
        }
        return map;
    }

    private List<Object> array() {
        List<Object> list = new ArrayList<>();
        at++;
        if (next() == ']') {
            at++;
            return list;
        }
        while (true) {
            list.add(value());
            char c = next();
            at++;
            if (c == ']') return list;
            if (c != ',') throw new IllegalArgumentException("expected , or ] at " + at);
        }
    }

    private String string() {
        StringBuilder out = new StringBuilder();
        at++;
        while (true) {
            char c = text.charAt(at++);
            if (c == '"') return out.toString();
            if (c != '\\') {
                out.append(c);
                continue;
            }
            char e = text.charAt(at++);
            switch (e) {
                case 'n': out.append('\n'); break;
                case 't': out.append('\t'); break;
                case 'r': out.append('\r'); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'u': out.append((char) Integer.parseInt(text.substring(at, at + 4), 16)); at += 4; break;
                default: out.append(e);
            }
        }
    }

    private Object number() {
        int start = at;
        while (at < text.length() && "+-0123456789.eE".indexOf(text.charAt(at)) >= 0) at++;
        String n = text.substring(start, at);
        if (n.isEmpty()) throw new IllegalArgumentException("unexpected character at " + start);
        if (n.indexOf('.') < 0 && n.indexOf('e') < 0 && n.indexOf('E') < 0) return Long.parseLong(n);
        return Double.parseDouble(n);
    }

    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    private static void write(StringBuilder out, Object value) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Boolean || value instanceof Integer || value instanceof Long
                || value instanceof Short || value instanceof Byte) {
            out.append(value);
        } else if (value instanceof Number) {
            double d = ((Number) value).doubleValue();
            out.append(Double.isFinite(d) ? Double.toString(d) : "null");
        } else if (value instanceof byte[]) {
            out.append("{\"$b64\":\"").append(Base64.getEncoder().encodeToString((byte[]) value)).append("\"}");
        } else if (value instanceof Date) {
            out.append(((Date) value).getTime() / 1000);
        } else if (value instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                if (!first) out.append(',');
                first = false;
                quote(out, String.valueOf(e.getKey()));
                out.append(':');
                write(out, e.getValue());
            }
            out.append('}');
        } else if (value instanceof List) {
            out.append('[');
            boolean first = true;
            for (Object e : (List<?>) value) {
                if (!first) out.append(',');
                first = false;
                write(out, e);
            }
            out.append(']');
        } else {
            quote(out, value.toString());
        }
    }

    private static void quote(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') out.append('\\').append(c);
            else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        out.append('"');
    }
}
