package io.laneway.harness.spring;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.springframework.http.HttpEntity;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpMethod;
import org.springframework.web.client.RestTemplate;

/**
 * {@code calls KEY SERVICE N USERS}: N calls to {@code http://SERVICE/hop} through the
 * {@code @LoadBalanced RestTemplate} of the running service KEY, from the harness's own thread,
 * which serves no request (as a scheduled job calls); with USERS &gt; 0, call i carries the header
 * {@code x-user-id: (i % USERS) + 1}. Prints
 * {@code {"cmd":"calls","calls":N,"errors":E,"paths":{"<hop line>":k},"users":{"1":{...}}}}.
 */
final class EntryCalls {
    static String run(Apps apps, String[] w) {
        RestTemplate rest = apps.restTemplate(w[0]);
        String url = "http://" + w[1] + "/hop";
        int n = Integer.parseInt(w[2]);
        int users = Integer.parseInt(w[3]);
        Map<String, Integer> paths = new TreeMap<>();
        Map<String, Map<String, Integer>> byUser = new TreeMap<>();
        int errors = 0;
        for (int i = 0; i < n; i++) {
            HttpHeaders headers = new HttpHeaders();
            String user = users > 0 ? Integer.toString(i % users + 1) : null;
            if (user != null) {
                headers.set("x-user-id", user);
            }
            String path;
            try {
                String answer = rest.exchange(url, HttpMethod.GET, new HttpEntity<>(headers), String.class).getBody();
                path = answer == null ? "" : answer.strip();
            } catch (RuntimeException e) {
                errors++;
                path = "error";
            }
            paths.merge(path, 1, Integer::sum);
            if (user != null) {
                byUser.computeIfAbsent(user, u -> new TreeMap<>()).merge(path, 1, Integer::sum);
            }
        }
        List<String> perUser = new ArrayList<>();
        byUser.forEach((u, c) -> perUser.add(json(u) + ":" + counts(c)));
        return "{\"cmd\":\"calls\",\"calls\":" + n + ",\"errors\":" + errors + ",\"paths\":" + counts(paths)
                + ",\"users\":{" + String.join(",", perUser) + "}}";
    }

    private static String counts(Map<String, Integer> counts) {
        List<String> parts = new ArrayList<>();
        counts.forEach((k, v) -> parts.add(json(k) + ":" + v));
        return "{" + String.join(",", parts) + "}";
    }

    private static String json(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    private EntryCalls() {}
}
