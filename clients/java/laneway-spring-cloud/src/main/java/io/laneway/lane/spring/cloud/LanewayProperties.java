package io.laneway.lane.spring.cloud;

import org.springframework.boot.context.properties.ConfigurationProperties;

/** Settings under {@code laneway.*}. */
@ConfigurationProperties(prefix = "laneway")
public class LanewayProperties {
    public static final String DEFAULT_HEADER = "x-lane";
    public static final String DEFAULT_METADATA_KEY = "laneway.lanes";

    /** The HTTP header that carries the lane, read from requests and put on outgoing calls. */
    private String header = DEFAULT_HEADER;

    /** The discovery metadata key that lists the lanes an instance serves. */
    private String metadataKey = DEFAULT_METADATA_KEY;

    /**
     * This pod's name in the hop records of probed requests ({@code kubectl laneway probe});
     * default: system property {@code laneway.pod.name}, else env {@code POD_NAME}, else
     * {@code HOSTNAME}.
     */
    private String podName;

    public String getPodName() {
        return podName;
    }

    public void setPodName(String podName) {
        this.podName = podName == null || podName.isBlank() ? null : podName.trim();
    }

    public String getHeader() {
        return header;
    }

    public void setHeader(String header) {
        this.header = header == null || header.isBlank() ? DEFAULT_HEADER : header.trim();
    }

    public String getMetadataKey() {
        return metadataKey;
    }

    public void setMetadataKey(String metadataKey) {
        this.metadataKey = metadataKey == null || metadataKey.isBlank() ? DEFAULT_METADATA_KEY : metadataKey.trim();
    }
}
