package io.laneway.lane.servlet;

import java.io.IOException;
import java.util.Enumeration;

import io.laneway.lane.Baggage;
import io.laneway.lane.Lane;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.FilterConfig;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;

/**
 * Sets {@link Lane} for each request: the lane header ({@code x-lane}, init-param
 * {@value #HEADER_PARAM}), else the {@code lane} member of the W3C {@code baggage} header
 * (init-param {@value #BAGGAGE_KEY_PARAM}), so that a service instrumented with OpenTelemetry
 * needs nothing else. A value that is not a valid lane is ignored. The previous lane is restored
 * when the request leaves the filter, so nothing leaks onto the next request of a pooled thread.
 *
 * <p>Register it for {@code REQUEST} dispatches (and {@code ASYNC} ones for async servlets).
 */
public class LaneFilter implements Filter {
    public static final String DEFAULT_HEADER = "x-lane";
    public static final String HEADER_PARAM = "header";
    public static final String BAGGAGE_KEY_PARAM = "baggage-key";
    static final String BAGGAGE_HEADER = "baggage";

    private String header = DEFAULT_HEADER;
    private String baggageKey = Baggage.DEFAULT_KEY;

    public LaneFilter() {}

    /** A filter reading the lane from {@code header} (then baggage), for programmatic registration. */
    public LaneFilter(String header) {
        this.header = nonEmpty(header, DEFAULT_HEADER);
    }

    @Override
    public void init(FilterConfig config) {
        String h = config.getInitParameter(HEADER_PARAM);
        if (h != null) {
            header = nonEmpty(h.trim(), DEFAULT_HEADER);
        }
        String key = config.getInitParameter(BAGGAGE_KEY_PARAM);
        if (key != null) {
            baggageKey = nonEmpty(key.trim(), Baggage.DEFAULT_KEY);
        }
    }

    @Override
    public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
            throws IOException, ServletException {
        String lane = request instanceof HttpServletRequest ? lane((HttpServletRequest) request) : null;
        String previous = Lane.set(lane);
        try {
            chain.doFilter(request, response);
        } finally {
            Lane.restore(previous);
        }
    }

    /** The header this filter reads the lane from. */
    public String header() {
        return header;
    }

    /**
     * The lane of an incoming request, or {@code null}: the lane header if it holds a valid lane,
     * else the first {@code baggage} header with a valid lane member.
     */
    protected String lane(HttpServletRequest request) {
        String lane = Lane.validOrNull(trim(request.getHeader(header)));
        if (lane != null) {
            return lane;
        }
        Enumeration<String> baggage = request.getHeaders(BAGGAGE_HEADER);
        while (baggage != null && baggage.hasMoreElements()) {
            lane = Baggage.lane(baggage.nextElement(), baggageKey);
            if (lane != null) {
                return lane;
            }
        }
        return null;
    }

    private static String trim(String value) {
        return value == null ? null : value.trim();
    }

    private static String nonEmpty(String value, String fallback) {
        return value == null || value.isEmpty() ? fallback : value;
    }
}
