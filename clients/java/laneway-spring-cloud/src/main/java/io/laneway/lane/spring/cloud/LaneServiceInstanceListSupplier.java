package io.laneway.lane.spring.cloud;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import io.laneway.lane.Baggage;
import io.laneway.lane.Lane;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.loadbalancer.Request;
import org.springframework.cloud.client.loadbalancer.RequestData;
import org.springframework.cloud.client.loadbalancer.RequestDataContext;
import org.springframework.cloud.loadbalancer.core.DelegatingServiceInstanceListSupplier;
import org.springframework.cloud.loadbalancer.core.ServiceInstanceListSupplier;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.http.HttpHeaders;
import reactor.core.publisher.Flux;

/**
 * Keeps the instances that serve the request's lane: those whose {@code laneway.lanes} metadata
 * (a comma-separated list that laneway writes onto each registered instance) names it, or names
 * {@value #BASELINE} for a request in no lane. laneway has already resolved fallbacks into those
 * lists, so nothing else is decided here.
 *
 * <p>The lane of a request is the first of: its lane header ({@code x-lane}), the {@code lane}
 * member of its W3C {@code baggage} header (both read from the load-balancer request's
 * {@link RequestDataContext}), the lane of the request served on this thread
 * ({@link Lane#effective()}, which includes this instance's own lane). A value that is not a
 * valid lane is ignored.
 *
 * <p>A service none of whose instances carries the metadata key is not governed by laneway: its
 * list passes unchanged. Once any instance carries it, an instance without it (started, not yet
 * marked) is left out, and so is one whose list is empty (not ready). No instance left is an
 * empty list: the caller answers as for a service with no instances (Spring Cloud Gateway: 503).
 *
 * <p>Put it after the cache ({@code withCaching()}): the cache keeps one list per service and
 * answers {@link #get(Request)} as {@link #get()}, so a supplier before it never sees the request.
 */
public class LaneServiceInstanceListSupplier extends DelegatingServiceInstanceListSupplier {
    /** The entry of {@code laneway.lanes} that marks an instance serving requests in no lane. */
    public static final String BASELINE = "baseline";

    private final String header;
    private final String metadataKey;

    /** Filters {@code delegate}'s lists by lane header {@code x-lane} and metadata key {@code laneway.lanes}. */
    public LaneServiceInstanceListSupplier(ServiceInstanceListSupplier delegate) {
        this(delegate, LanewayProperties.DEFAULT_HEADER, LanewayProperties.DEFAULT_METADATA_KEY);
    }

    public LaneServiceInstanceListSupplier(ServiceInstanceListSupplier delegate, String header, String metadataKey) {
        super(delegate);
        this.header = requireText(header, "header");
        this.metadataKey = requireText(metadataKey, "metadataKey");
    }

    /**
     * A {@code ServiceInstanceListSupplierBuilder} step configured from {@link LanewayProperties} in
     * {@code context} (defaults when there are none), for a supplier chain of one's own:
     * {@code builder().withDiscoveryClient().withCaching().with(LaneServiceInstanceListSupplier::create)}.
     */
    public static ServiceInstanceListSupplier create(ConfigurableApplicationContext context,
            ServiceInstanceListSupplier delegate) {
        LanewayProperties properties = context.getBeanProvider(LanewayProperties.class)
                .getIfAvailable(LanewayProperties::new);
        return new LaneServiceInstanceListSupplier(delegate, properties.getHeader(), properties.getMetadataKey());
    }

    /** The delegate's lists, for the lane of the request served on this thread. */
    @Override
    public Flux<List<ServiceInstance>> get() {
        String lane = Lane.effective();
        return delegate.get().map(instances -> select(instances, lane));
    }

    /** The delegate's lists, for the lane of {@code request}. */
    @Override
    public Flux<List<ServiceInstance>> get(Request request) {
        // read now, on the calling thread: Lane.effective() means nothing where the list arrives
        String lane = lane(request);
        return delegate.get(request).map(instances -> select(instances, lane));
    }

    /** The lane of {@code request}, or {@code null} for baseline. */
    protected String lane(Request<?> request) {
        Object context = request == null ? null : request.getContext();
        if (context instanceof RequestDataContext) {
            RequestData data = ((RequestDataContext) context).getClientRequest();
            HttpHeaders headers = data == null ? null : data.getHeaders();
            if (headers != null) {
                String lane = Lane.validOrNull(trim(headers.getFirst(header)));
                if (lane != null) {
                    return lane;
                }
                List<String> baggage = headers.get("baggage");
                if (baggage != null) {
                    for (String value : baggage) {
                        lane = Baggage.lane(value);
                        if (lane != null) {
                            return lane;
                        }
                    }
                }
            }
        }
        return Lane.effective();
    }

    /** The instances of {@code instances} that serve {@code lane} ({@code null}: baseline). */
    public List<ServiceInstance> select(List<ServiceInstance> instances, String lane) {
        if (instances == null || instances.isEmpty() || !governed(instances)) {
            return instances;
        }
        String wanted = lane != null ? lane : BASELINE;
        List<ServiceInstance> selected = new ArrayList<>(instances.size());
        for (ServiceInstance instance : instances) {
            Map<String, String> metadata = instance.getMetadata();
            if (metadata != null && lists(metadata.get(metadataKey), wanted)) {
                selected.add(instance);
            }
        }
        return selected;
    }

    private boolean governed(List<ServiceInstance> instances) {
        for (ServiceInstance instance : instances) {
            Map<String, String> metadata = instance.getMetadata();
            if (metadata != null && metadata.containsKey(metadataKey)) {
                return true;
            }
        }
        return false;
    }

    /** Whether the comma-separated {@code lanes} has {@code lane} as an entry (spaces around entries allowed). */
    static boolean lists(String lanes, String lane) {
        if (lanes == null) {
            return false;
        }
        int n = lanes.length();
        int start = 0;
        while (start < n) {
            int end = lanes.indexOf(',', start);
            if (end < 0) {
                end = n;
            }
            int s = start;
            int e = end;
            while (s < e && lanes.charAt(s) == ' ') {
                s++;
            }
            while (e > s && lanes.charAt(e - 1) == ' ') {
                e--;
            }
            if (e - s == lane.length() && lanes.regionMatches(s, lane, 0, e - s)) {
                return true;
            }
            start = end + 1;
        }
        return false;
    }

    /** The lane header read from requests. */
    public String header() {
        return header;
    }

    /** The metadata key holding an instance's lanes. */
    public String metadataKey() {
        return metadataKey;
    }

    private static String trim(String value) {
        return value == null ? null : value.trim();
    }

    private static String requireText(String value, String name) {
        if (value == null || value.isBlank()) {
            throw new IllegalArgumentException("empty " + name);
        }
        return value.trim();
    }
}
